"""A gold judge scored beside the training judge, and seeds that each train their own SFT policy."""

import json
from pathlib import Path

from tests.test_end_to_end import run_cli
from testbed.store import read_table

QUICK = ["--set", "budget.episodes=64", "--set", "eval.every=64"]


def run_dir_of(proc) -> Path:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_the_gold_judge_scores_episodes_beside_a_lenient_training_judge(tmp_path, shared_cache):
    lenient = ["--set", "judge={name: rubric, args: {checks: [length, ending], dominance: 0.0}}",
               "--set", "gold_judge={name: rubric}", "--set", "seeds=[0]"]
    run = run_dir_of(run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *QUICK, *lenient], tmp_path,
                             cache=shared_cache))
    ep = read_table(run, "episodes")
    judged = ep[ep["judge_error"].isna()]
    assert judged["gold_reward"].notna().all() and len(judged) == 64
    # the lenient judge passes everything the strict one passes, and more
    assert (judged["reward"] >= judged["gold_reward"]).all()
    assert judged["reward"].sum() > judged["gold_reward"].sum()
    summary = (run / "summary.md").read_text()
    assert "Goodhart gap" in summary and (run / "goodhart.csv").exists()

    # a share of episodes, picked by the clock: about half, the same clocks in every run
    half = run_dir_of(run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *QUICK, *lenient,
                               "--set", "gold_judge.share=0.5"], tmp_path, cache=shared_cache))
    ep_half = read_table(half, "episodes")
    scored = ep_half[ep_half["gold_reward"].notna()]
    assert 16 <= len(scored) <= 48
    from testbed.world_rules import unit_hash
    assert all(unit_hash("gold", int(t)) < 0.5 for t in scored["t"])


def test_without_a_gold_judge_the_gold_columns_are_empty(tmp_path, shared_cache):
    run = run_dir_of(run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *QUICK, "--set", "seeds=[0]"],
                             tmp_path, cache=shared_cache))
    ep = read_table(run, "episodes")
    assert ep["gold_reward"].isna().all()
    assert not (run / "goodhart.csv").exists()


def test_per_seed_sft_trains_one_policy_per_seed_and_seed_0_is_the_shared_one(tmp_path):
    cache = tmp_path / "cache"
    small = [*QUICK, "--set", "policy.sft.steps=20", "--set", "policy.sft.eval_samples=8"]
    per_seed = run_dir_of(run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small,
                                   "--set", "policy.sft.per_seed=true"], tmp_path, cache=cache))
    sft = json.loads((per_seed / "manifest.json").read_text())["sft"]["per_seed"]
    assert set(sft) == {"0", "1"} and sft["0"]["key"] != sft["1"]["key"]
    assert len(list(cache.glob("policy-*"))) == 2
    ep = read_table(per_seed, "episodes")
    assert set(ep["seed"]) == {0, 1}

    shared = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small], tmp_path, cache=cache)
    shared_dir = run_dir_of(shared)
    assert "Training the SFT policy" not in shared.stderr  # seed 0's policy is the shared one, from the cache
    assert json.loads((shared_dir / "manifest.json").read_text())["sft"]["key"] == sft["0"]["key"]
    a, b = read_table(per_seed, "episodes"), read_table(shared_dir, "episodes")
    cols = ["seed", "t", "response", "reward"]
    same0 = a[a.seed == 0].sort_values("t")[cols].reset_index(drop=True).equals(b[b.seed == 0].sort_values("t")[cols].reset_index(drop=True))
    same1 = a[a.seed == 1].sort_values("t")[cols].reset_index(drop=True).equals(b[b.seed == 1].sort_values("t")[cols].reset_index(drop=True))
    assert same0 and not same1  # seed 1 started from another policy


def test_per_seed_policies_trained_side_by_side_are_the_ones_trained_in_turn(tmp_path):
    small = [*QUICK, "--set", "policy.sft.steps=20", "--set", "policy.sft.eval_samples=8", "--set", "policy.sft.per_seed=true"]
    side = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small, "--set", "runtime.parallel_arms=true"],
                   tmp_path, cache=tmp_path / "side")
    assert "training 2 SFT policies side by side" in side.stderr, side.stderr[-3000:]
    turn = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small], tmp_path, cache=tmp_path / "turn")
    a, b = read_table(run_dir_of(side), "episodes"), read_table(run_dir_of(turn), "episodes")
    weights = sorted((tmp_path / "side").glob("policy-*/model.safetensors"))
    assert len(weights) == 2
    for w in weights:
        assert w.read_bytes() == (tmp_path / "turn" / w.parent.name / w.name).read_bytes()
    cols = ["seed", "t", "response", "reward"]
    assert a.sort_values(["seed", "t"])[cols].reset_index(drop=True).equals(b.sort_values(["seed", "t"])[cols].reset_index(drop=True))


def test_the_gap_and_the_withheld_share_by_hand():
    import pandas as pd
    import pytest

    from analysis import goodhart

    # one arm, two seeds, a switch at 4: training reward 1 everywhere the judge passed; gold 1/2 in
    # phase 1 for seed 0, 1 for seed 1; phase 2 all 0 for both (nothing to withhold there)
    rows = []
    for seed, gold1 in ((0, [1, 0, 1, 0]), (1, [1, 1, 1, 1])):
        for t in range(8):
            phase1 = t < 4
            rows.append({"arm": "a", "seed": seed, "t": t, "reward": 1.0 if phase1 else 0.0, "judge_error": None,
                         "gold_reward": float(gold1[t]) if phase1 else 0.0})
    out = goodhart.gap_overview(pd.DataFrame(rows), [4], 8).set_index("phase")
    assert out.loc["1", "gap"] == pytest.approx(0.25)  # seeds: 0.5 and 0
    assert out.loc["1", "withheld"] == pytest.approx(0.25)
    assert out.loc["2", "gap"] == 0.0 and pd.isna(out.loc["2", "withheld"])
    assert out.loc["all", "gap"] == pytest.approx(0.125) and out.loc["all", "withheld"] == pytest.approx(0.25)
    assert out.loc["1", "gap_lo"] <= 0.25 <= out.loc["1", "gap_hi"]
    rise = goodhart.gap_rise(pd.DataFrame(rows), window=4).iloc[0]
    assert rise["gap_start"] == pytest.approx(0.25) and rise["gap_end"] == 0.0 and rise["gap_rise"] == pytest.approx(-0.25)
