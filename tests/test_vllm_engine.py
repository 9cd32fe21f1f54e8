"""vLLM as the rollout engine (testbed/engines/vllm_engine.py). These need vLLM, which lives in its own
environment (`make vllm`, then `.venv-vllm/bin/python -m pytest tests/test_vllm_engine.py`); in the
main environment they skip."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here: `make vllm` builds .venv-vllm (docs/vllm.md)")

from testbed.engines.mismatch import logprob_gaps
from testbed.engines.vllm_engine import VLLMEngine
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.store import read_table
from testbed.world import prompts, render_prompt

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    tok = WordTokenizer.build()
    # head_dim 32: vLLM's CPU attention takes 32, 64, ...
    cfg = PolicyConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=32)
    model = build_policy(cfg, tok, seed=0).eval()
    engine = VLLMEngine(model, tok, SamplingConfig(max_new_tokens=16), cpu_threads_bind="nobind")
    return engine, model, tok


def texts(n):
    specs = prompts("train")
    return [render_prompt(specs[i * 7], ["cute", "academic", "classical"][: 1 + i % 3]) for i in range(n)]


def gaps(model, trajs):
    """|behaviour - trainer| log-prob per sampled token, over all trajectories."""
    return logprob_gaps(model, trajs)


def test_trajectories_and_logprobs_agree_with_the_trainer(setup):
    engine, model, tok = setup
    trajs = engine.generate(texts(6), n=2)
    assert len(trajs) == 12 and [t.prompt_text for t in trajs[:2]] == [texts(6)[0]] * 2
    for traj in trajs:
        assert traj.prompt_tokens == tok.prompt_ids(traj.prompt_text)  # ids in, no re-tokenisation
        ids = traj.response_tokens
        assert len(traj.segments) == 1 and len(traj.segments[0].logprobs) == len(ids) <= 16
        stops = [i for i, t in enumerate(ids) if t in engine.stop_ids]
        assert stops in ([], [len(ids) - 1])  # up to and including the first stop id
        assert traj.response_text == tok.decode(ids) and traj.policy_version == engine.version
    gap = gaps(model, trajs)
    assert gap.mean() < 1e-4 and gap.max() < 1e-3, (float(gap.mean()), float(gap.max()))


def test_extend_continues_a_multi_turn_episode(setup):
    engine, model, tok = setup
    trajs = engine.generate(texts(3))
    first = [list(t.response_tokens) for t in trajs]
    engine.extend(trajs, ["make it shorter."] * 3)
    for traj, before in zip(trajs, first):
        kinds = [seg.kind for seg in traj.segments]
        assert kinds == ["action", "observation", "action"] and traj.segments[0].tokens == before
        assert traj.segments[1].tokens == tok.observation_ids("make it shorter.") and traj.segments[1].logprobs is None
        assert traj.response_text == tok.decode(traj.segments[2].tokens)
    assert gaps(model, trajs).max() < 1e-3  # the second draft's log-probs too, with the whole context


def test_a_sync_moves_the_engine_to_the_new_weights(setup):
    engine, model, _ = setup
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    with pytest.raises(RuntimeError, match="probe"):  # not synced yet: the probe sees the old weights
        engine.verify()
    engine.load_weights(None, 1)
    assert engine.version == 1 and engine.last_sync["sync_probe_max_abs"] < 1e-3 and engine.last_sync["sync_s"] > 0
    assert engine.last_sync["sync_probe_mean_abs"] < 1e-5
    trajs = engine.generate(texts(8))
    assert all(t.policy_version == 1 for t in trajs)
    new = {k: v.clone() for k, v in model.state_dict().items()}
    assert gaps(model, trajs).max() < 1e-3  # the new weights' log-probs
    model.load_state_dict(old)
    assert gaps(model, trajs).mean() > 1e-2  # and not the old ones'
    model.load_state_dict(new)
    engine.load_weights(None, 1)  # same version, nothing moved: no copy
    assert engine.last_sync == {}
    # a remote engine's copy: the weights come as a state dict
    engine.load_weights(old, 2)
    assert gaps(model, engine.generate(texts(4))).max() < 1e-3


def test_tiny_scenario_end_to_end_on_vllm(tmp_path, shared_cache):
    env = {
        "TESTBED_CACHE": str(shared_cache),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    }
    args = [
        "tests/data/tiny.yaml",
        "--out",
        str(tmp_path),
        "--run-name",
        "v",
        "--set",
        "seeds=[0]",
        "--set",
        "budget.episodes=64",
        "--set",
        "eval.every=32",
        "--set",
        "eval.prompts=4",
        "--set",
        "policy.hidden_size=64",
        "--set",
        "engine.type=vllm",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    updates = read_table(tmp_path / "v", "updates")
    assert len(updates) == 4
    assert (updates["mismatch_abs_mean"] < 1e-4).all() and (updates["mismatch_dis_out_of_band"] == 0).all()
    assert (updates["sync_probe_max_abs"] < 1e-3).all()  # every update synced and verified
    episodes = read_table(tmp_path / "v", "episodes")
    assert sorted(episodes["policy_version"].unique()) == [0, 1, 2, 3]
