"""The memory plan (testbed/models/memory.py, in `--dry-run`): computed from a config.json alone on
the meta device, so the plans of Qwen3-30B-A3B, OLMoE-1B-7B and Mixtral-8x7B need no weights;
each GPU recipe fits the device it names, and an oversized setting is refused with exit 2, naming
the largest item and the settings that would make it fit."""

import json
import shutil
from pathlib import Path
from typing import Literal

import pytest

from testbed.cli import run_command as cli
from testbed.cli.memory_plan import config_rows
from trainers.sao import SAOConfig, SAOTrainer

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "scenarios" / "model_configs"
RECIPES = {"gpu_moe": "olmoe-1b-7b", "gpu_moe_8x": "qwen3-30b-a3b"}
# per recipe: a setting that cannot fit, the item the refusal names, a fix it offers
OVERSIZED = {
    "gpu_moe": (
        ["arms.0.args.episodes_per_update=64", "arms.0.args.value_pretrain_batch=64"],
        "activations",
        "smaller",
    ),
    "gpu_moe_8x": (["runtime.learner_strategy=replicate"], "policy optimiser", "learner_strategy: fsdp"),
}


def stand_in(tmp_path: Path, name: str) -> Path:
    """A checkpoint directory with the model's real config.json and an empty weights file: the
    dry run reads the config alone."""
    directory = tmp_path / name
    directory.mkdir()
    shutil.copy(CONFIGS / name / "config.json", directory)
    (directory / "model.safetensors").touch()
    return directory


def test_the_plans_of_three_real_moes_come_from_their_configs():
    rows = {}
    for name, billions in (("qwen3-30b-a3b", 30.5), ("olmoe-1b-7b", 6.9), ("mixtral-8x7b", 46.7)):
        head, *plans = config_rows(str(CONFIGS / name), 141.0, [1, 8])
        assert head["parameters"] / 1e9 == pytest.approx(billions, rel=0.01)
        rows[name] = {(r["gpus"], r["settings"]): r for r in plans}
    qwen = rows["qwen3-30b-a3b"]
    # one 141 GB GPU cannot hold a full fine-tuning learner of Qwen3-30B-A3B; eight sharded ones can
    assert not qwen[(1, "replicate")]["fits"] and qwen[(1, "replicate")]["learner_gb"] > 500
    assert qwen[(8, "fsdp + checkpointing")]["fits"]
    # sharding cuts a rank's parameters and optimiser state by about 1/W
    assert qwen[(8, "fsdp + checkpointing")]["learner_gb"] < qwen[(1, "replicate")]["learner_gb"] / 6
    assert rows["olmoe-1b-7b"][(8, "replicate")]["fits"]


def dry_run(capsys, recipe: str, checkpoint: Path, *sets: str) -> tuple[int, str, str]:
    args = [str(ROOT / "scenarios" / f"{recipe}.yaml"), "--set", f"policy.checkpoint={checkpoint}", "--dry-run"]
    for s in sets:
        args += ["--set", s]
    code = cli.main([*args, "--json"])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_each_gpu_recipe_fits_and_an_oversized_setting_is_refused(capsys, monkeypatch, tmp_path, recipe):
    monkeypatch.setenv("ZAI_API_KEY", "not-a-key")
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    checkpoint = stand_in(tmp_path, RECIPES[recipe])
    code, out, err = dry_run(capsys, recipe, checkpoint)
    assert code == 0, err
    memory = json.loads(out)["memory"]
    assert memory["device_source"] in ("runtime.device_memory_gb", "torch.cuda.mem_get_info")
    assert all(p["fits"] for p in memory["arms"].values())
    # refused before anything is built, the largest item and a fix named
    sets, item, fix = OVERSIZED[recipe]
    code, _, err = dry_run(capsys, recipe, checkpoint, *sets)
    assert code == 2
    assert "memory plan" in err and f"the largest item is {item}" in err and fix in err


def test_micro_batch_tokens_bound_the_activation_figure():
    from testbed.models.memory import ModelShape, Settings, activation_bytes

    shape = ModelShape(1000, 500, layers=2, hidden=8, vocab=10, kv_heads=1, head_dim=4, top_k=2, expert_width=4,
                       largest_layer=400)  # fmt: skip
    whole = Settings(episodes_per_update=8, prompt_tokens=6, new_tokens=4)  # 8 rows of 10 tokens
    # per token: 34 x 8 x 4 / 2 + 2 x 3 x 4 x 4 = 640 bytes a layer, 2 layers; the scored new
    # tokens keep float32 log-probabilities over the vocabulary and their gradient: 10 x 4 x 2
    assert activation_bytes(shape, whole) == 80 * 1280 + 32 * 80
    # 25 tokens: two rows at a time; 5: still one row (a micro-batch holds at least one)
    assert activation_bytes(shape, Settings(**{**vars(whole), "micro_batch_tokens": 25})) == 20 * 1280 + 8 * 80
    assert activation_bytes(shape, Settings(**{**vars(whole), "micro_batch_tokens": 5})) == 10 * 1280 + 4 * 80


def test_a_sharded_learner_is_planned_while_it_builds_the_whole_models():
    """FSDP cuts the models after the learner builds them whole (learner_strategy.shard_trainer): a
    sharded rank's plan holds that moment too, and a build that cannot fit is refused by name even
    though the sharded steady state would fit."""
    from testbed.models.memory import GB, ModelShape, Settings, plan

    shape = ModelShape(30 * 10**9, 29 * 10**9, layers=48, hidden=2048, vocab=151936, kv_heads=4, head_dim=128,
                       top_k=8, expert_width=768, largest_layer=6 * 10**8)  # fmt: skip
    base = Settings(dtype="bfloat16", strategy="fsdp", learner_workers=8, param_dtype="bfloat16",
                    activation_checkpointing=True, critic="moe", new_tokens=256)  # fmt: skip
    built = plan(shape, base, 141 * GB)["processes"]["learner rank, building"]["items"]
    assert built == {"policy whole (building)": 60 * 10**9, "critic whole (building)": 60 * 10**9}
    assert plan(shape, base, 141 * GB)["fits"]  # 120 GB of whole models under the 127 GB a plan may fill
    with_reference = plan(shape, Settings(**{**vars(base), "reference": True}), 141 * GB)
    assert not with_reference["fits"] and with_reference["processes"]["learner rank"]["total"] < 0.9 * 141 * GB
    assert with_reference["largest"]["process"] == "learner rank, building"
    assert any("kl_coef: 0" in fix for fix in with_reference["fixes"])
    assert any("policy.lora" in fix for fix in with_reference["fixes"])
    one_process = Settings(**{**vars(base), "learner_workers": 1})  # nothing is sharded: no build moment
    assert "learner rank, building" not in plan(shape, one_process, 141 * GB)["processes"]


def test_the_8_gpu_recipe_with_a_kl_reference_is_refused_for_its_build(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ZAI_API_KEY", "not-a-key")
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    checkpoint = stand_in(tmp_path, RECIPES["gpu_moe_8x"])
    code, _, err = dry_run(capsys, "gpu_moe_8x", checkpoint, "arms.0.args.kl_coef=0.1")
    assert code == 2
    assert "learner rank, building" in err and "whole (building)" in err and "kl_coef: 0" in err


class WholeCritic(SAOTrainer):
    """A plugin trainer whose own Config trains the whole critic, on larger pretraining batches, by default."""

    class Config(SAOConfig):
        critic_trainable: Literal["moe", "all", "lora"] = "all"
        value_pretrain_batch: int = 96


def test_the_plan_takes_each_trainers_settings_from_the_trainer(monkeypatch, tmp_path):
    """No default is restated by the plan: a trainer whose Config has other defaults is planned by them."""
    from testbed.cli.memory_plan import settings_for
    from testbed.cli.plan import build_policy_shape, build_trainer
    from testbed.scenario.schema import load_scenario

    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    arms = (
        "[{name: a, type: 'tests.test_memory_plan:WholeCritic'}, {name: b, type: running_mean, args: {kl_coef: 0.1}}]"
    )
    scenario = load_scenario(ROOT / "tests" / "data" / "golden.yaml", [f"arms={arms}"])
    _, model, pad_id = build_policy_shape(scenario)
    whole, window = (
        settings_for(scenario, arm, model, build_trainer(scenario, i, model, pad_id))
        for i, arm in enumerate(scenario.arms)
    )
    assert (whole.critic, whole.episodes_per_update, whole.round_episodes, whole.reference) == ("all", 96, 32, False)
    assert (window.critic, window.episodes_per_update, window.reference) == (None, 32, True)
