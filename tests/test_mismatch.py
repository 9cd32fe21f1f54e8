"""Training-inference mismatch metrics (testbed/engines/mismatch.py), the engine section of the
schema, and the parts of the vLLM engine that need no vLLM (the expert layout of its weight sync)."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from testbed.engines.hf_engine import HFEngine
from testbed.engines.mismatch import DIS_BAND, MismatchProbe, logprob_gaps, mismatch_metrics
from testbed.engines.vllm_engine import checkpoint_tensors, stacked_experts
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig, load_scenario
from testbed.store import read_table
from testbed.world import prompts, render_prompt

ROOT = Path(__file__).resolve().parent.parent


def test_metrics_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5, -9.0]])
    engine = torch.tensor([[-1.0, -2.5, -0.1, 0.0]])
    mask = torch.tensor([[True, True, True, False]])  # the last token is padding: never counted
    m = mismatch_metrics(trainer, engine, mask)
    # log r = trainer - engine = [0, 0.5, -0.4]
    assert m["mismatch_tokens"] == 3
    assert m["mismatch_abs_mean"] == pytest.approx(0.3)
    assert m["mismatch_abs_max"] == pytest.approx(0.5)
    k3 = [0.0, math.exp(0.5) - 1 - 0.5, math.exp(-0.4) - 1 + 0.4]
    assert m["mismatch_kl_k3"] == pytest.approx(sum(k3) / 3)
    # DIS's band (0.7, 6.0): only r = e^-0.4 = 0.67 is outside
    assert m["mismatch_dis_out_of_band"] == pytest.approx(1 / 3)
    # a narrower band (0.8, 1.28): e^0.5 = 1.65 is outside too
    assert mismatch_metrics(trainer, engine, mask, band=(0.2, 0.28))["mismatch_dis_out_of_band"] == pytest.approx(2 / 3)
    assert math.isnan(m["mismatch_expert_diff"])  # no routing given


def test_expert_sets_compare_as_sets():
    lp = torch.zeros(1, 3)
    mask = torch.tensor([[True, True, True]])
    trainer = torch.tensor([[[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[0, 1], [2, 3]]]])  # [B, T, layers, k]
    engine = torch.tensor(
        [[[[1, 0], [3, 2]], [[4, 5], [6, 0]], [[0, 1], [2, 3]]]]
    )  # token 0 reordered, token 1 differs
    m = mismatch_metrics(lp, lp, mask, DIS_BAND, trainer, engine)
    assert m["mismatch_expert_diff"] == pytest.approx(1 / 3)
    assert m["mismatch_abs_max"] == 0 and m["mismatch_kl_k3"] == 0


def test_no_tokens_gives_nan_not_zero():
    m = mismatch_metrics(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.bool))
    assert (
        m["mismatch_tokens"] == 0 and math.isnan(m["mismatch_abs_mean"]) and math.isnan(m["mismatch_dis_out_of_band"])
    )


def small_policy(hidden=32, heads=2):
    tok = WordTokenizer.build()
    cfg = PolicyConfig(hidden_size=hidden, num_layers=2, num_heads=heads, num_kv_heads=1, num_experts=4, expert_size=16)
    return build_policy(cfg, tok, seed=0).eval(), tok


def test_probe_on_hf_samples_is_float_rounding_and_skips_stale_episodes():
    torch.manual_seed(0)
    model, tok = small_policy()
    engine = HFEngine(model, tok, SamplingConfig(max_new_tokens=12))
    specs = prompts("train")
    trajs = engine.generate([render_prompt(specs[i * 5], ["cute", "academic"]) for i in range(8)])
    probe = MismatchProbe(model, tok.pad_id, 1.0)
    m = probe(trajs, version=0)
    assert m["mismatch_tokens"] == sum(len(t.response_tokens) for t in trajs)
    assert m["mismatch_abs_max"] < 1e-4 and m["mismatch_dis_out_of_band"] == 0
    # an episode of an older version is staleness, not mismatch: left out
    trajs[0].policy_version = -1
    assert probe(trajs, version=0)["mismatch_tokens"] == m["mismatch_tokens"] - len(trajs[0].response_tokens)
    # corrupted behaviour log-probs are seen
    trajs[1].segments[0].logprobs = [lp - 1.0 for lp in trajs[1].segments[0].logprobs]
    assert probe(trajs, version=0)["mismatch_abs_max"] == pytest.approx(1.0, abs=1e-4)
    # the unbatched reference the vLLM checks use agrees: ~0 but on the corrupted episode, exactly 1 there
    gaps = logprob_gaps(model, trajs)
    n1 = len(trajs[1].response_tokens)
    assert len(gaps) == m["mismatch_tokens"]
    first = len(trajs[0].response_tokens)
    assert torch.allclose(gaps[first : first + n1], torch.ones(n1, dtype=torch.float64), atol=1e-4)
    assert gaps[:first].max() < 1e-4 and gaps[first + n1 :].max() < 1e-4


def test_vllm_weight_layout_matches_the_trainers_experts():
    """The CPU weight sync hands vLLM w13 = [gate; up] and w2 = down per expert: exactly the fused
    tensors transformers keeps in memory, regrouped from the checkpoint names."""
    model, _ = small_policy(hidden=64)
    experts = stacked_experts(checkpoint_tensors(model))
    assert sorted(experts) == [f"model.layers.{i}.mlp.experts" for i in range(2)]
    for i, layer in enumerate(model.model.layers):
        w13, w2 = experts[f"model.layers.{i}.mlp.experts"]
        torch.testing.assert_close(w13, layer.mlp.experts.gate_up_proj.detach(), rtol=0, atol=0)
        torch.testing.assert_close(w2, layer.mlp.experts.down_proj.detach(), rtol=0, atol=0)


def test_engine_section_of_the_schema():
    base = ROOT / "scenarios" / "vllm_shift.yaml"
    scenario = load_scenario(base)
    assert scenario.engine.type == "vllm" and scenario.engine.measure_mismatch
    assert scenario.policy.hidden_size // scenario.policy.num_heads == 32  # vLLM's CPU attention
    assert not load_scenario(ROOT / "scenarios" / "style_shift.yaml").engine.measure_mismatch  # hf: off by default
    cases = {
        "engine.type=nope": "unknown engine 'nope'",
        "engine.args.bogus=1": "engine.args.bogus: unknown key 'bogus'",
        "engine.args.probe_tolerance=0": "engine.args.probe_tolerance",
        "engine.type=hf": "engine.args.cpu_threads_bind: not an argument of HFEngine",  # vllm's args left behind
    }
    for override, message in cases.items():
        with pytest.raises(Exception) as info:
            load_scenario(base, [override])
        assert "engine" in str(info.value) and message in str(info.value), (override, str(info.value))


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_engine_without_vllm_says_how_to_get_it():
    from testbed.engines.vllm_engine import VLLMEngine

    model, tok = small_policy(hidden=64)
    with pytest.raises(RuntimeError, match="make vllm"):
        VLLMEngine(model, tok, SamplingConfig())


def test_mismatch_columns_in_a_tiny_run(tmp_path, shared_cache):
    env = {
        "TESTBED_CACHE": str(shared_cache),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    args = [
        "tests/data/tiny.yaml",
        "--out",
        str(tmp_path),
        "--run-name",
        "m",
        "--set",
        "seeds=[0]",
        "--set",
        "budget.episodes=48",
        "--set",
        "eval.every=48",
        "--set",
        "eval.prompts=4",
        "--set",
        "engine.mismatch=true",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    updates = read_table(tmp_path / "m", "updates")
    assert len(updates) == 3
    assert (updates["mismatch_tokens"] > 0).all()
    assert (updates["mismatch_abs_max"] < 1e-4).all() and (updates["mismatch_dis_out_of_band"] == 0).all()
    assert (updates["mismatch_kl_k3"] >= 0).all()
