"""`runtime.device`: what can be checked on a machine without CUDA. "auto" is the CPU here and
changes no row; asking for CUDA that is not there is refused by name; batches go where they are
asked; a checkpoint written on a GPU loads here; and every tensor the engine, the lean forwards and
the trainers build names its device (or is on the list of those built on the CPU on purpose).

What needs a GPU (the same run on CUDA, its speed and memory) is benchmarks/gpu_check.py."""

import ast
import io
from collections import Counter

import pandas as pd
import pytest
import torch
import torch.serialization

from testbed.cli.run_command import main
from testbed.device import gpus, resolve, scenario_problems
from testbed.runtimes import checkpoint
from testbed.runtimes.learn import warm_up, warmup_cache_path
from testbed.scenario.schema import RuntimeConfig, ScenarioError, load_scenario
from testbed.store import read_table
from tests.test_golden import COLUMNS, FROM_POLICY, GOLDEN, KEYS, ROOT
from tests.test_trainers import TOK, policy, rollouts
from trainers.batching import collate
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
SCENARIO = str(ROOT / "tests/data/golden.yaml")
ONE_ARM = "arms=[{name: running_mean, type: running_mean, args: {window: 32, episodes_per_update: 16, kl_coef: 0.2}}]"


@no_cuda
def test_auto_is_the_cpu_here_and_writes_the_reference_rows(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    assert resolve("auto") == torch.device("cpu")
    code = main(
        [
            SCENARIO,
            *FROM_POLICY,
            "--set",
            "runtime.device=auto",
            "--set",
            ONE_ARM,
            "--out",
            str(tmp_path),
            "--run-name",
            "auto",
            "--no-report",
        ]
    )
    assert code == 0
    for table, columns in COLUMNS.items():  # an arm x seed's rows do not depend on the other arms
        got = read_table(tmp_path / "auto", table)[columns].sort_values(KEYS[table]).reset_index(drop=True)
        want = pd.read_csv(GOLDEN / f"{table}.csv", keep_default_na=False, na_values=[""])
        want = want[want["arm"] == "running_mean"].reset_index(drop=True)
        got = pd.read_csv(io.StringIO(got.to_csv(index=False)), keep_default_na=False, na_values=[""])
        assert len(want) > 0
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, atol=1e-6, obj=table)


@no_cuda
def test_cuda_without_cuda_is_refused_naming_the_field(tmp_path, capsys):
    assert main([SCENARIO, "--set", "runtime.device=cuda", "--out", str(tmp_path), "--no-report"]) == 2
    err = "".join(capsys.readouterr())
    assert "runtime.device is 'cuda'" in err and "no CUDA" in err
    assert not any(tmp_path.iterdir())  # refused before the run directory
    # A per-arm override is named by its own path; the dry run shows the device and warns, exit 0.
    scenario = load_scenario(SCENARIO, ["arms.1.runtime={device: 'cuda:1'}"])
    assert scenario_problems(scenario) == [
        "arms.1.runtime.device is 'cuda:1' but torch sees no CUDA device here; use runtime.device: cpu (or auto)"
    ]
    assert main([SCENARIO, "--set", "runtime.device=cuda", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cuda -> cuda" in out and "warning:" in out and "runtime.device is 'cuda'" in out


def test_device_values_are_checked_when_the_scenario_loads():
    for bad in ("gpu", "cuda:x", "CUDA"):
        with pytest.raises(ScenarioError, match=r"runtime\.device: String should match pattern"):
            load_scenario(SCENARIO, [f"runtime.device={bad}"])
    assert RuntimeConfig().device == "cpu" and gpus(RuntimeConfig(), "actor") == 0
    assert (
        gpus(RuntimeConfig(device="cuda"), "actor") == 1
        and gpus(RuntimeConfig(device="cuda", task_gpus=0.25), "task") == 0.25
    )


def test_collate_puts_every_tensor_on_the_asked_device():
    trajs = rollouts(policy(), 4)
    plain = collate(trajs, TOK.pad_id)
    on_cpu = collate(trajs, TOK.pad_id, device="cpu")
    on_meta = collate(trajs, TOK.pad_id, device=torch.device("meta"))  # shapes only: any device but the CPU will do
    for name in plain.__dataclass_fields__:
        a, b, c = getattr(plain, name), getattr(on_cpu, name), getattr(on_meta, name)
        assert a.device.type == b.device.type == "cpu" and torch.equal(a, b)
        assert c.device.type == "meta" and (c.shape, c.dtype) == (a.shape, a.dtype), name


@pytest.fixture
def saved_as_on_cuda(monkeypatch):
    """torch.save tags every storage as CUDA's, as a run on a GPU writes its files, until
    `del registry[0]` (the fixture's value)."""
    registry = [(0, lambda storage: "cuda:0", lambda storage, location: None), *torch.serialization._package_registry]
    monkeypatch.setattr(torch.serialization, "_package_registry", registry)
    return registry


@no_cuda
def test_a_checkpoint_written_on_cuda_resumes_here(tmp_path, saved_as_on_cuda):
    model = policy()
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4}, pad_id=TOK.pad_id)
    trainer.update(rollouts(model, 4))
    path = checkpoint.save(tmp_path, "arm", 0, {"loop": {"updates": 1}, "trainer": trainer.state_dict()})
    del saved_as_on_cuda[0]  # from here torch saves and loads as on this machine
    with pytest.raises(RuntimeError, match="CUDA"):  # the control: the file really claims CUDA
        torch.load(path, weights_only=False)
    restored = RunningMeanTrainer(policy(seed=1), {"episodes_per_update": 4}, pad_id=TOK.pad_id)
    restored.load_state_dict(checkpoint.load(path)["trainer"])
    batch = rollouts(model, 4, seed=1)
    assert trainer.update(batch) == restored.update(batch)  # the same next step: optimiser state included


@no_cuda
def test_a_warm_up_cache_written_on_cuda_loads_here(tmp_path, monkeypatch, saved_as_on_cuda):
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path))
    args = {
        "episodes_per_update": 4,
        "value_pretrain_samples": 4,
        "value_pretrain_epochs": 1,
        "value_pretrain_batch": 4,
    }
    trainer = SAOTrainer(policy(), args, pad_id=TOK.pad_id)
    key = {"test": "cuda-cache"}
    report = warm_up(trainer, lambda n: rollouts(trainer.policy, n), key, log=lambda _: None)
    del saved_as_on_cuda[0]
    with pytest.raises(RuntimeError, match="CUDA"):
        torch.load(warmup_cache_path(key), weights_only=False)
    fresh = SAOTrainer(policy(), args, pad_id=TOK.pad_id)
    loaded = warm_up(fresh, lambda n: pytest.fail("the cache must be used"), key, log=lambda _: None)
    assert loaded["cache_file"] == report["cache_file"]
    for (name, a), b in zip(trainer.critic.state_dict().items(), fresh.critic.state_dict().values()):
        assert torch.equal(a, b), name


# Tensors built on the CPU on purpose (each then moved once, or device-neutral): (file, function, factory) -> count.
BUILT_ON_THE_CPU = {
    ("testbed/engines/hf_engine.py", "sample_categorical", "rand"): 1,  # the CPU generator: the one checkpoints save
    ("testbed/engines/hf_engine.py", "_sample", "rand"): 1,
    ("testbed/engines/hf_engine.py", "__init__", "tensor"): 1,  # the stop ids, moved per batch
    ("testbed/engines/hf_engine.py", "left_padded", "full"): 1,  # the prompts, filled row by row, moved once
    ("testbed/engines/hf_engine.py", "left_padded", "zeros"): 1,
    ("testbed/engines/hf_engine.py", "left_padded", "tensor"): 1,
    ("testbed/engines/mismatch.py", "padded_batch", "full"): 1,  # moved to the policy's device by the probe
    ("testbed/engines/mismatch.py", "padded_batch", "zeros"): 3,
    ("testbed/engines/mismatch.py", "__call__", "zeros"): 3,  # empty: no token to measure
    ("trainers/batching.py", "collate", "full"): 1,  # moved to `device` at the end
    ("trainers/batching.py", "collate", "zeros"): 4,
    ("trainers/batching.py", "collate", "tensor"): 1,
    ("trainers/advantages.py", "length_adaptive_lambda", "as_tensor"): 1,  # keeps its input's device
    ("trainers/baselines.py", "broadcast_to_tokens", "as_tensor"): 1,  # then moved to the mask's
    ("trainers/running_mean.py", "update", "tensor"): 1,  # the window's Python floats, moved once
    ("trainers/policy_step.py", "_denominators", "tensor"): 1,  # two counts (all_reduce_sum moves them)
    ("trainers/value_pretrain.py", "pretrain_values", "tensor"): 1,
}
FACTORIES = {
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "eye",
    "rand",
    "randn",
    "randint",
    "tensor",
    "as_tensor",
    "linspace",
}


def test_every_tensor_on_the_hot_path_names_its_device():
    """Without a GPU a forgotten device= cannot fail a run (the meta device cannot run these paths:
    they read values, e.g. the number of real tokens), so the rule is read from the source: a
    `torch.<factory>(...)` with no `device=` is a CPU tensor and must be on the list above."""
    files = [
        "testbed/engines/hf_engine.py",
        "testbed/models/decoder.py",
        "testbed/models/lean_forward.py",
        "testbed/models/policy.py",
        "testbed/models/critic.py",
        "testbed/engines/mismatch.py",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "trainers").glob("*.py")),
    ]
    found: Counter = Counter()
    for name in files:
        for fn in ast.walk(ast.parse((ROOT / name).read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in FACTORIES
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch"
                    and not any(k.arg == "device" for k in node.keywords)
                ):
                    found[(name, fn.name, node.func.attr)] += 1
    assert dict(found) == BUILT_ON_THE_CPU, "give the new tensor device=..., or list it here with the reason"


def test_a_trainer_keeps_what_it_builds_on_its_policys_device():
    """The policy on the meta device (shapes, no memory: any device but the CPU will do): every
    module a trainer builds from it (SAO's critic with its value head, the KL reference) is there too."""
    with torch.device("meta"):
        model = policy()
    trainer = SAOTrainer(model, {"episodes_per_update": 4, "kl_coef": 0.1}, pad_id=TOK.pad_id)
    modules = {"policy": trainer.policy, "critic": trainer.critic, "reference": trainer.reference.model}
    for name, module in modules.items():
        on = {t.device.type for t in [*module.parameters(), *module.buffers()]}
        assert on == {"meta"}, (name, on)
