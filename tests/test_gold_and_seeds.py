"""A gold judge scored beside the training judge, and seeds that each train their own SFT policy."""

import json
from pathlib import Path

from testbed.store import read_table
from tests.test_end_to_end import run_cli

QUICK = ["--set", "budget.episodes=64", "--set", "eval.every=64"]


def run_dir_of(proc) -> Path:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_the_gold_judge_scores_a_share_of_episodes_beside_a_lenient_training_judge(tmp_path, shared_cache):
    from testbed.world.rules import unit_hash

    lenient = [
        "--set",
        "judge={type: rubric, args: {checks: [length, ending], dominance: 0.0}}",
        "--set",
        "gold_judge={type: rubric, share: 0.5}",
        "--set",
        "seeds=[0]",
    ]
    run = run_dir_of(
        run_cli(
            ["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *QUICK, *lenient], tmp_path, cache=shared_cache
        )
    )
    ep = read_table(run, "episodes")
    judged = ep[ep["judge_error"].isna()]
    assert len(judged) == 64
    # the share is picked by a hash of the clock: the same clocks in every run and arm
    picked = judged["t"].map(lambda t: unit_hash("gold", int(t)) < 0.5)
    assert judged["gold_reward"].notna().tolist() == picked.tolist() and 16 <= picked.sum() <= 48
    scored = judged[picked]
    # the lenient judge passes everything the strict one passes, and more: its quality checks are
    # a subset of the strict one's (the reward also needs the style, which both judge alike)
    assert (scored["reward"] >= scored["gold_reward"]).all()
    assert (scored["r_quality"] >= scored["gold_quality"]).all()
    assert scored["r_quality"].sum() > scored["gold_quality"].sum()
    summary = (run / "summary.md").read_text()
    assert "Goodhart gap" in summary and (run / "goodhart.csv").exists()


def test_per_seed_sft_one_policy_per_seed_side_by_side_as_in_turn_and_seed_0_is_the_shared_one(tmp_path):
    small = [
        *QUICK,
        "--no-report",
        "--set",
        "policy.sft.steps=20",
        "--set",
        "policy.sft.eval_samples=8",
        "--set",
        "policy.sft.per_seed=true",
    ]
    turn_proc = run_cli(
        ["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small], tmp_path, cache=tmp_path / "turn"
    )
    turn = run_dir_of(turn_proc)
    sft = json.loads((turn / "manifest.json").read_text())["sft"]["per_seed"]
    assert set(sft) == {"0", "1"} and sft["0"]["key"] != sft["1"]["key"]
    assert len(list((tmp_path / "turn").glob("policy-*"))) == 2

    # side by side (Ray tasks, parallel arms): the same two policies, bit for bit, and the same rows
    side_proc = run_cli(
        ["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small, "--set", "runtime.parallel_arms=true"],
        tmp_path,
        cache=tmp_path / "side",
    )
    assert "training 2 SFT policies side by side" in side_proc.stderr, side_proc.stderr[-3000:]
    side = run_dir_of(side_proc)
    weights = sorted((tmp_path / "side").glob("policy-*/model.safetensors"))
    assert len(weights) == 2
    for w in weights:
        assert w.read_bytes() == (tmp_path / "turn" / w.parent.name / w.name).read_bytes()
    cols = ["seed", "t", "response", "reward"]
    a, b = read_table(turn, "episodes"), read_table(side, "episodes")
    assert (
        a.sort_values(["seed", "t"])[cols]
        .reset_index(drop=True)
        .equals(b.sort_values(["seed", "t"])[cols].reset_index(drop=True))
    )

    # without per_seed every seed starts from seed 0's policy, found in the cache
    shared_proc = run_cli(
        ["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *small[:-2]], tmp_path, cache=tmp_path / "turn"
    )
    shared = run_dir_of(shared_proc)
    assert "Training the SFT policy" not in shared_proc.stderr
    assert json.loads((shared / "manifest.json").read_text())["sft"]["key"] == sft["0"]["key"]
    c = read_table(shared, "episodes")
    rows = lambda df, seed: df[df.seed == seed].sort_values("t")[cols].reset_index(drop=True)  # noqa: E731
    assert rows(a, 0).equals(rows(c, 0)) and not rows(a, 1).equals(rows(c, 1))  # seed 1 started from another policy


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
            rows.append(
                {
                    "arm": "a",
                    "seed": seed,
                    "t": t,
                    "reward": 1.0 if phase1 else 0.0,
                    "judge_error": None,
                    "gold_reward": float(gold1[t]) if phase1 else 0.0,
                }
            )
    out = goodhart.gap_overview(pd.DataFrame(rows), [4], 8).set_index("phase")
    assert out.loc["1", "gap"] == pytest.approx(0.25)  # seeds: 0.5 and 0
    assert out.loc["1", "withheld"] == pytest.approx(0.25)
    assert out.loc["2", "gap"] == 0.0 and pd.isna(out.loc["2", "withheld"])
    assert out.loc["all", "gap"] == pytest.approx(0.125) and out.loc["all", "withheld"] == pytest.approx(0.25)
    assert out.loc["1", "gap_lo"] <= 0.25 <= out.loc["1", "gap_hi"]
    rise = goodhart.gap_rise(pd.DataFrame(rows), window=4).iloc[0]
    assert (
        rise["gap_start"] == pytest.approx(0.25) and rise["gap_end"] == 0.0 and rise["gap_rise"] == pytest.approx(-0.25)
    )
