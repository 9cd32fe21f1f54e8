"""The non-stationary metrics (analysis/metrics/nonstationary.py) on hand-built tables whose answers are
worked out by hand: reward area, best plateau and dynamic regret per segment, the old style's fall
per switch, and rliable's intervals and probability of improvement."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from analysis.metrics import nonstationary as ns
from analysis.report import report
from tests.test_analysis import episodes, evals_table, reference_table, write_run

TARGETS = ("cute", "chuunibyou")


def two_segment_run() -> pd.DataFrame:
    """Two arms, two seeds, a switch at 40 of 80 episodes, piecewise-constant rewards:

    arm a seed 0: 40 x 1.0             | 20 x 0.0, 20 x 0.5
    arm a seed 1: 30 x 0.5, 10 x 0.75  | 20 x 0.0, 20 x 0.5
    arm b seed 0: 40 x 0.5             | 40 x 1.0
    arm b seed 1: 40 x 0.25            | 30 x 0.5, 10 x 1.0
    """

    def run(arm, seed, *pieces):
        return episodes(
            np.concatenate([np.full(n, r) for n, r in pieces]), arm=arm, seed=seed, switch_points=(40,), targets=TARGETS
        )

    return pd.concat(
        [
            run("a", 0, (40, 1.0), (20, 0.0), (20, 0.5)),
            run("a", 1, (30, 0.5), (10, 0.75), (20, 0.0), (20, 0.5)),
            run("b", 0, (40, 0.5), (40, 1.0)),
            run("b", 1, (40, 0.25), (30, 0.5), (10, 1.0)),
        ],
        ignore_index=True,
    )


def by_key(table: pd.DataFrame, *keys) -> dict:
    return {tuple(r[k] for k in keys): r for _, r in table.iterrows()}


# ----------------------------------------------------------------------------------------------
# per segment


def test_segment_area_plateau_and_dynamic_regret_by_hand():
    seg = by_key(ns.segment_metrics(two_segment_run(), [40], 80, window=10), "arm", "seed", "segment")
    assert len(seg) == 8
    # reward area = mean reward over the segment
    assert seg["a", 0, 0]["auc"] == 1.0 and seg["a", 1, 0]["auc"] == (30 * 0.5 + 10 * 0.75) / 40
    assert seg["b", 1, 1]["auc"] == (30 * 0.5 + 10 * 1.0) / 40
    # plateau = the last 10 judged episodes of the segment
    assert [seg["a", s, 0]["plateau"] for s in (0, 1)] == [1.0, 0.75]
    assert [seg["b", s, 1]["plateau"] for s in (0, 1)] == [1.0, 1.0]
    # best plateau: segment 0 arm a (mean of 1.0 and 0.75), segment 1 arm b (1.0; arm a's is 0.5)
    for arm in "ab":
        for s in (0, 1):
            assert (seg[arm, s, 0]["best_plateau"], seg[arm, s, 0]["best_arm"]) == (0.875, "a")
            assert (seg[arm, s, 1]["best_plateau"], seg[arm, s, 1]["best_arm"]) == (1.0, "b")
    # regret = sum over the 40 episodes of (best - reward); dynamic regret = regret / 40
    expected = {
        ("a", 0, 0): 40 * 0.875 - 40,
        ("a", 1, 0): 40 * 0.875 - 22.5,
        ("b", 0, 0): 40 * 0.875 - 20,
        ("b", 1, 0): 40 * 0.875 - 10,
        ("a", 0, 1): 40 - 10,
        ("a", 1, 1): 40 - 10,
        ("b", 0, 1): 0.0,
        ("b", 1, 1): 40 - 25,
    }
    for key, regret in expected.items():
        assert seg[key]["regret"] == regret, key
        assert seg[key]["dynamic_regret"] == regret / 40, key
        assert seg[key]["dynamic_regret"] == seg[key]["best_plateau"] - seg[key]["auc"], key
    # seed 0 of arm a beat its arm's mean plateau for the whole segment: a negative regret
    assert seg["a", 0, 0]["dynamic_regret"] == -0.125
    assert (seg["a", 0, 1]["start"], seg["a", 0, 1]["end"], seg["a", 0, 1]["target_style"]) == (40, 80, "chuunibyou")
    assert seg["a", 0, 1]["episodes"] == 40 and seg["a", 0, 1]["window"] == 10


def test_failed_judge_calls_are_not_episodes_of_a_segment():
    ep = two_segment_run()
    failed = ep[(ep["arm"] == "b") & (ep["seed"] == 0) & (ep["t"] == 50)].assign(reward=np.nan, judge_error="timeout")
    seg = by_key(ns.segment_metrics(pd.concat([ep, failed]), [40], 80, window=10), "arm", "seed", "segment")
    assert seg["b", 0, 1]["episodes"] == 40 and seg["b", 0, 1]["auc"] == 1.0


def test_a_segment_without_episodes_has_no_metrics_and_no_say_in_the_best_plateau():
    ep = two_segment_run()
    ep = ep[~((ep["arm"] == "b") & (ep["t"] >= 40))]  # arm b stopped at the switch
    seg = by_key(ns.segment_metrics(ep, [40], 80, window=10), "arm", "seed", "segment")
    row = seg["b", 0, 1]
    assert row["episodes"] == 0 and math.isnan(row["auc"]) and math.isnan(row["dynamic_regret"])
    assert seg["a", 0, 1]["best_plateau"] == 0.5 and seg["a", 0, 1]["best_arm"] == "a"
    assert seg["a", 0, 1]["dynamic_regret"] == 0.5 - 0.25


def test_regret_is_against_the_reference_policy_when_there_is_one():
    # seed 0's reference policy earns 0.8 in segment 0 and 0.9 in segment 1; seed 1's 0.6 and 0.7
    ref = reference_table({0: [0.8, 0.9], 1: [0.6, 0.7]}, arms=("a", "b"))
    seg = by_key(ns.segment_metrics(two_segment_run(), [40], 80, window=10, reference=ref), "arm", "seed", "segment")
    assert {r["regret_against"] for r in seg.values()} == {"reference"}
    # regret = sum over the 40 episodes of (reference - reward) = 40 x reference - reward sum
    expected = {
        ("a", 0, 0): 40 * 0.8 - 40,
        ("a", 1, 0): 40 * 0.6 - 22.5,
        ("b", 0, 0): 40 * 0.8 - 20,
        ("b", 1, 0): 40 * 0.6 - 10,
        ("a", 0, 1): 40 * 0.9 - 10,
        ("a", 1, 1): 40 * 0.7 - 10,
        ("b", 0, 1): 40 * 0.9 - 40,
        ("b", 1, 1): 40 * 0.7 - 25,
    }
    for key, regret in expected.items():
        assert seg[key]["regret"] == pytest.approx(regret), key
        assert seg[key]["dynamic_regret"] == pytest.approx(seg[key]["reference_reward"] - seg[key]["auc"]), key
    assert seg["b", 0, 1]["dynamic_regret"] == pytest.approx(-0.1)  # beat its reference
    # independent of the arms compared: arm a alone has the same regret (the best arm's would move)
    alone = two_segment_run()
    alone = alone[alone["arm"] == "a"]
    with_ref = by_key(ns.segment_metrics(alone, [40], 80, window=10, reference=ref), "arm", "seed", "segment")
    without = by_key(ns.segment_metrics(alone, [40], 80, window=10), "arm", "seed", "segment")
    assert with_ref["a", 0, 1]["regret"] == seg["a", 0, 1]["regret"]
    assert without["a", 0, 1]["regret_against"] == "best arm" and without["a", 0, 1]["regret"] == 40 * 0.5 - 10


def test_without_a_reference_table_regret_is_against_the_best_arm_and_says_so():
    seg = ns.segment_metrics(two_segment_run(), [40], 80, window=10)
    assert set(seg["regret_against"]) == {"best arm"}
    assert (seg["reference_reward"] == seg["best_plateau"]).all()


def test_pooled_regret_is_over_the_segments_after_switches_only():
    targets = ("cute", "chuunibyou", "classical")
    rows = []
    for arm, levels in (("a", (1.0, 0.2, 0.4)), ("b", (0.0, 0.6, 0.8))):
        for s in (0, 1):
            r = np.concatenate([np.full(40, v + 0.05 * s) for v in levels])
            rows.append(episodes(r, arm=arm, seed=s, switch_points=(40, 80), targets=targets))
    seg = ns.segment_metrics(pd.concat(rows, ignore_index=True), [40, 80], 120, window=10)
    iv = by_key(ns.interval_estimates(seg, ["auc", "dynamic_regret"], "segment", reps=100), "arm", "metric", "task")
    pooled = iv["a", "auc", "all"]
    assert pooled["tasks"] == "1 2"  # segment 0 (initial learning) is shown on its own only
    assert pooled["mean"] == pytest.approx(np.mean([0.2, 0.25, 0.4, 0.45]))
    assert iv["a", "auc", 0]["mean"] == pytest.approx(1.025)
    pi = by_key(ns.probability_of_improvement(seg, ["dynamic_regret"], "segment", reps=100), "arm_x", "arm_y", "task")
    assert pi["a", "b", "all"]["tasks"] == "1 2" and pi["a", "b", "all"]["p_improvement"] == 0.0
    assert pi["a", "b", 0]["p_improvement"] == 1.0  # a was better in segment 0, which the pool leaves out


def test_window_defaults_to_realigns_auto_window():
    seg = ns.segment_metrics(two_segment_run(), [40], 80)
    assert set(seg["window"]) == {10}  # a quarter of the 40-episode phases


# ----------------------------------------------------------------------------------------------
# per switch: the old style's fall


def test_fall_time_interpolates_between_evaluations():
    # the evaluation at t=30 stands for the policy at the switch (40); 0.5 at 60 -> 0.0 at 80
    # crosses 0.1 at 60 + 20 * 0.4 / 0.5 = 76
    t, share = [0, 30, 60, 80], [0.9, 0.9, 0.5, 0.0]
    assert ns.fall_time(t, share, 40, 100, 0.1) == pytest.approx(36.0)
    assert ns.fall_time(t, share, 40, 100, 0.5) == pytest.approx(20.0)  # reaching the level exactly counts
    assert ns.fall_time(t[::-1], share[::-1], 40, 100, 0.1) == pytest.approx(36.0)  # any order


def test_fall_time_is_zero_when_already_under_and_censored_when_never():
    assert ns.fall_time([0, 40, 60], [0.9, 0.05, 0.3], 40, 100, 0.1) == 0.0
    # under the level only at t=100, the next switch: too late; censored at the phase's end (60 episodes)
    from analysis.metrics.old_fall import fall_censored

    assert ns.fall_time([0, 40, 60, 100], [0.9, 0.8, 0.5, 0.0], 40, 100, 0.1) == 60.0
    assert fall_censored([0, 40, 60, 100], [0.9, 0.8, 0.5, 0.0], 40, 100, 0.1)
    assert not fall_censored([0, 40, 60], [0.9, 0.05, 0.3], 40, 100, 0.1)
    # no evaluation at or before the switch: nothing to measure from
    assert math.isnan(ns.fall_time([50, 60], [0.5, 0.0], 40, 100, 0.1))


def test_old_fall_per_arm_seed_and_switch_from_held_out_shares():
    targets = ("cute", "chuunibyou", "classical")
    ep = episodes(np.ones(300), switch_points=(100, 200), targets=targets)
    ev = pd.concat(
        [
            evals_table(
                [
                    (0, "cute", {"cute": 0.8, "chuunibyou": 0.2}),
                    (100, "chuunibyou", {"cute": 0.6, "chuunibyou": 0.4}),
                    (150, "chuunibyou", {"cute": 0.0, "chuunibyou": 1.0}),
                    (200, "classical", {"chuunibyou": 0.9, "classical": 0.1}),
                    (250, "classical", {"chuunibyou": 0.5, "classical": 0.5}),
                ],
                seed=0,
            ),
            evals_table([(0, "cute", {"cute": 0.05, "chuunibyou": 0.95})], seed=1),
        ]
    )
    falls = by_key(ns.old_fall(ev, [100, 200], 300, ep, old_level=0.1), "seed", "switch")
    first = falls[0, 1]
    assert (first["from_style"], first["to_style"], first["old_share_at_switch"]) == ("cute", "chuunibyou", 0.6)
    assert first["old_fall"] == pytest.approx(50 * 0.5 / 0.6)  # 0.6 -> 0.0 over 50 episodes reaches 0.1
    # chuunibyou stays at 0.5: censored at the phase's end, 100 episodes after the switch, and counted
    assert falls[0, 2]["old_fall"] == 100 and falls[0, 2]["old_fall_censored"]
    assert falls[1, 1]["old_fall"] == 0.0  # seed 1: cute at 0.05 at its last evaluation before the switch
    # seed 1 has no evaluation after either switch: nothing says whether it fell (NaN, not censored)
    assert falls[1, 2]["old_share_at_switch"] == 0.95 and math.isnan(falls[1, 2]["old_fall"])
    assert not falls[1, 2]["old_fall_censored"]
    assert ns.old_fall(ev, [], 300, ep).empty and ns.old_fall(pd.DataFrame(), [100], 300, ep).empty


# ----------------------------------------------------------------------------------------------
# rliable: intervals and probability of improvement


def switch_table(values: dict[str, list[list[float]]], metric: str = "episodes_to_bar") -> pd.DataFrame:
    """values[arm][seed][switch - 1]."""
    return pd.DataFrame(
        [
            {"arm": arm, "seed": s, "switch": k + 1, metric: v}
            for arm, seeds in values.items()
            for s, row in enumerate(seeds)
            for k, v in enumerate(row)
        ]
    )


def test_probability_of_improvement_is_one_when_every_seed_is_better():
    table = switch_table({"fast": [[60, 70], [65, 90]], "slow": [[200, 300], [250, 100]]})
    pi = by_key(ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=200), "arm_x", "arm_y", "task")
    assert len(pi) == 2 * 3  # two ordered pairs; switch 1, switch 2, pooled
    for task in (1, "all"):
        row = pi["fast", "slow", task]
        assert row["better"] == "lower"  # fewer episodes to recover is better
        assert (row["p_improvement"], row["p_improvement_lo"], row["p_improvement_hi"]) == (1.0, 1.0, 1.0)
        assert pi["slow", "fast", task]["p_improvement"] == 0.0
    # switch 2: slow's seed 1 (100) comes close, but both of fast's seeds (70, 90) are still lower
    assert pi["fast", "slow", 2]["p_improvement"] == 1.0
    assert pi["fast", "slow", "all"]["tasks"] == "1 2"


def test_probability_of_improvement_is_half_for_identical_arms_and_counts_pairs():
    table = switch_table({"x": [[1.0], [2.0], [3.0]], "y": [[1.0], [2.0], [3.0]], "z": [[0.5], [2.5], [4.0]]})
    pi = by_key(ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=200), "arm_x", "arm_y")
    assert pi["x", "y"]["p_improvement"] == 0.5 and pi["y", "x"]["p_improvement"] == 0.5
    assert pi["x", "y"]["p_improvement_lo"] <= 0.5 <= pi["x", "y"]["p_improvement_hi"]
    # x lower than z: 1 < 2.5, 1 < 4, 2 < 2.5, 2 < 4, 3 < 4 (5 of 9 pairs); z lower: the other 4
    assert pi["x", "z"]["p_improvement"] == pytest.approx(5 / 9)
    assert pi["z", "x"]["p_improvement"] == pytest.approx(4 / 9)  # = 1 - 5/9: each pair counted once
    assert pi["x", "z"]["p_improvement_lo"] == pytest.approx(1 - pi["z", "x"]["p_improvement_hi"])


def test_probability_of_improvement_counts_higher_as_better_for_the_reward_area():
    table = pd.DataFrame(
        {"arm": ["hi", "hi", "lo", "lo"], "seed": [0, 1, 0, 1], "segment": 0, "auc": [0.9, 0.8, 0.2, 0.3]}
    )
    pi = by_key(ns.probability_of_improvement(table, ["auc"], "segment", reps=200), "arm_x", "arm_y")
    assert pi["hi", "lo"]["better"] == "higher" and pi["hi", "lo"]["p_improvement"] == 1.0


def test_the_bootstraps_twins_agree_with_rliables_statistics():
    _, rl_metrics = ns._rliable()
    rng = np.random.default_rng(7)
    for n_x, n_y, tasks in ((2, 2, 1), (3, 2, 2), (5, 4, 3), (4, 7, 1)):
        for ties in (False, True):  # whole numbers: many ties between and within arms
            x, y = (rng.integers(0, 4, size=(n, tasks)) if ties else rng.normal(size=(n, tasks)) for n in (n_x, n_y))
            x, y = x.astype(float), y.astype(float)
            m = ns.improvement_matrix(x, y, x)
            assert m[0, 1] == pytest.approx(rl_metrics.probability_of_improvement(x, y), abs=1e-12)
            assert m[1, 0] == pytest.approx(rl_metrics.probability_of_improvement(y, x), abs=1e-12)
            assert m[0, 2] == 0.5 and m[1, 1] == 0.5  # an arm against itself
            assert ns.iqm(x) == pytest.approx(rl_metrics.aggregate_iqm(x), abs=1e-12)


def test_intervals_contain_the_mean_and_have_no_nan_from_two_seeds():
    rng = np.random.default_rng(3)
    for seeds in (2, 3, 5):
        table = switch_table(
            {"a": rng.uniform(50, 300, size=(seeds, 2)).tolist(), "b": rng.uniform(50, 300, size=(seeds, 2)).tolist()}
        )
        iv = ns.interval_estimates(table, ["episodes_to_bar"], "switch", reps=300)
        assert len(iv) == 2 * 3 and list(iv["n"]) == [seeds] * 6
        cols = ["mean", "mean_lo", "mean_hi", "iqm", "iqm_lo", "iqm_hi"]
        assert not iv[cols].isna().any().any()
        assert (iv["mean_lo"] <= iv["mean"]).all() and (iv["mean"] <= iv["mean_hi"]).all()
        assert (iv["iqm_lo"] <= iv["iqm"]).all() and (iv["iqm"] <= iv["iqm_hi"]).all()
        for _, row in iv[iv["task"] != "all"].iterrows():
            values = table[(table["arm"] == row["arm"]) & (table["switch"] == row["task"])]["episodes_to_bar"]
            assert row["mean"] == pytest.approx(values.mean())
            assert values.min() <= row["mean_lo"] and row["mean_hi"] <= values.max()
        pooled = iv[(iv["task"] == "all") & (iv["arm"] == "a")].iloc[0]
        assert pooled["mean"] == pytest.approx(table[table["arm"] == "a"]["episodes_to_bar"].mean())


def test_one_seed_has_a_point_and_no_interval():
    iv = ns.interval_estimates(switch_table({"a": [[100.0]]}), ["episodes_to_bar"], "switch", reps=100)
    (row,) = iv.to_dict("records")
    assert row["mean"] == 100.0 and row["iqm"] == 100.0 and row["n"] == 1
    assert math.isnan(row["mean_lo"]) and math.isnan(row["iqm_hi"])
    pi = ns.probability_of_improvement(switch_table({"a": [[1.0]], "b": [[2.0]]}), ["episodes_to_bar"], "switch")
    assert list(pi["p_improvement"]) == [1.0, 0.0] and pi["p_improvement_lo"].isna().all()


def test_iqm_is_the_mean_of_the_middle_half():
    iv = ns.interval_estimates(
        switch_table({"a": [[0.0], [1.0], [2.0], [100.0]]}), ["episodes_to_bar"], "switch", reps=100
    )
    assert iv["mean"].iloc[0] == 25.75 and iv["iqm"].iloc[0] == 1.5  # 0 and 100 trimmed


def test_seeds_without_a_value_are_dropped_per_task_and_pooling_keeps_complete_tasks():
    nan = float("nan")
    table = switch_table({"a": [[100, 200, 300], [110, nan, 310]], "b": [[120, 220, 320], [130, 230, nan]]})
    iv = by_key(ns.interval_estimates(table, ["episodes_to_bar"], "switch", reps=200), "arm", "task")
    assert iv["a", 2]["n"] == 1 and iv["a", 2]["mean"] == 200 and math.isnan(iv["a", 2]["mean_lo"])
    assert iv["b", 3]["n"] == 1 and iv["a", 3]["n"] == 2
    # only switch 1 has a value for every seed of every arm
    assert iv["a", "all"]["tasks"] == "1" and iv["a", "all"]["mean"] == 105 and iv["b", "all"]["mean"] == 125
    pi = by_key(ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=200), "arm_x", "arm_y", "task")
    assert pi["a", "b", "all"]["tasks"] == "1" and pi["a", "b", "all"]["p_improvement"] == 1.0
    assert pi["a", "b", 2]["n_x"] == 1 and pi["a", "b", 2]["p_improvement"] == 1.0  # 200 < 220 and < 230


def test_no_complete_task_gives_an_empty_pool():
    nan = float("nan")
    iv = by_key(
        ns.interval_estimates(switch_table({"a": [[nan, 1.0], [2.0, nan]]}), ["episodes_to_bar"], "switch", reps=100),
        "arm",
        "task",
    )
    assert iv["a", "all"]["tasks"] == "" and iv["a", "all"]["n"] == 0 and math.isnan(iv["a", "all"]["mean"])


def test_estimates_are_reproducible_and_leave_numpys_generator_alone():
    table = switch_table({"a": [[60, 70], [65, 90], [80, 75]], "b": [[200, 60], [250, 100], [90, 95]]})
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = ns.interval_estimates(table, ["episodes_to_bar"], "switch", reps=300)
    pi_first = ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=300)
    assert (np.random.get_state()[1] == before).all()
    pd.testing.assert_frame_equal(first, ns.interval_estimates(table, ["episodes_to_bar"], "switch", reps=300))
    pd.testing.assert_frame_equal(
        pi_first, ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=300)
    )
    # the seed is the one used (many seeds: the interval's ends are not just the extreme values)
    wide = switch_table({"a": np.random.default_rng(0).uniform(0, 100, size=(12, 1)).tolist()})
    ends = [
        ns.interval_estimates(wide, ["episodes_to_bar"], "switch", reps=300, seed=s)[["mean_lo", "mean_hi"]]
        for s in (0, 0, 1)
    ]
    assert ends[0].equals(ends[1]) and not ends[0].equals(ends[2])


def test_two_or_three_seeds_raise_no_warnings():
    table = switch_table({"a": [[60, 70], [65, 90], [80, 75]], "b": [[200, 60], [250, 100]]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns.interval_estimates(table, ["episodes_to_bar"], "switch", reps=100)
        ns.probability_of_improvement(table, ["episodes_to_bar"], "switch", reps=100)


# ----------------------------------------------------------------------------------------------
# the report


def test_report_writes_the_nonstationary_tables_and_figures(tmp_path):
    ep = two_segment_run()
    ev = pd.concat(
        [
            evals_table(
                [
                    (0, "cute", {"cute": 0.9, "chuunibyou": 0.1}),
                    (40, "chuunibyou", {"cute": 0.9, "chuunibyou": 0.1}),
                    (60, "chuunibyou", {"cute": 0.1, "chuunibyou": 0.9}),
                ],
                arm=arm,
                seed=s,
            )
            for arm in "ab"
            for s in (0, 1)
        ]
    )
    run = write_run(tmp_path, "two_arms", ep, {"switch_points": [40], "budget": 80, "seeds": [0, 1]}, evals=ev)
    report([run])
    seg = pd.read_csv(run / "segments_by_seed.csv")
    assert len(seg) == 8 and set(seg["run"]) == {"two_arms"}
    # the report's window is auto_window's 10, as above
    assert seg.set_index(["arm", "seed", "segment"]).loc[("a", 0, 0), "dynamic_regret"] == -0.125
    intervals = pd.read_csv(run / "intervals.csv")
    assert set(intervals["metric"]) == {"auc", "dynamic_regret", "episodes_to_bar", "dip", "old_fall"}
    falls = pd.read_csv(run / "switches_by_seed.csv")
    assert falls["old_fall"].tolist() == [20.0] * 4 and set(falls["old_level"]) == {0.1}
    improvement = pd.read_csv(run / "improvement.csv")
    assert {(r.arm_x, r.arm_y) for r in improvement.itertuples()} == {("a", "b"), ("b", "a")}
    assert set(improvement["metric"]) == {"episodes_to_bar", "dynamic_regret"}
    pairs = pd.read_csv(run / "paired.csv")
    assert {(r.arm_x, r.arm_y) for r in pairs.itertuples()} == {("a", "b")} and set(pairs["pairing"]) == {"paired"}
    text = (run / "summary.md").read_text()
    for heading in (
        "### Per segment",
        "### Pooled over switches and segments (rliable)",
        "### Probability of improvement (rliable)",
        "**dynamic regret**",
    ):
        assert heading in text
    assert "| b | 1: chuunibyou (t 40-80) | 2 |" in text
    for name in ("segments", "probability_of_improvement"):
        assert (run / "figures" / f"{name}.png").stat().st_size > 10_000, name
    assert pd.read_csv(run / "summary.csv")["old_fall"].tolist() == [20.0, 20.0]


def test_report_leads_with_paired_verdicts_and_reads_the_reference_table(tmp_path):
    ep = two_segment_run()
    ref = reference_table({0: [0.8, 0.9], 1: [0.6, 0.7]}, arms=("a", "b"))
    run = write_run(tmp_path, "with_ref", ep, {"switch_points": [40], "budget": 80, "seeds": [0, 1]}, reference=ref)
    report([run], figures=False)
    text = (run / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[2] == "## Verdicts: paired differences in episodes to the bar"
    verdict = lines[4]
    assert verdict.startswith("- Switch 1 (cute → chuunibyou): a − b: ") and "paired over 2 seeds" in verdict
    assert "resolvable at 2 seeds" in verdict and "a 10% difference needs" in verdict
    assert "reference policy's reward" in text  # the bar's source
    per_seed = pd.read_csv(run / "switches_by_seed.csv")
    assert set(per_seed["bar_source"]) == {"reference"} and per_seed["bar"].tolist() == pytest.approx([0.81, 0.63] * 2)
    seg = pd.read_csv(run / "segments_by_seed.csv")
    assert set(seg["regret_against"]) == {"reference"}
    pairs = pd.read_csv(run / "paired.csv")
    row = pairs[(pairs["metric"] == "episodes_to_bar") & (pairs["task"] == "1")].iloc[0]
    by_seed = per_seed.set_index(["arm", "seed"])["episodes_to_bar"]
    diffs = [by_seed["a", s] - by_seed["b", s] for s in (0, 1)]
    assert row["diff"] == pytest.approx(np.mean(diffs)) and row["n"] == 2
    # an older run without the table still reports, on the best plateau, and says so
    old = write_run(tmp_path, "no_ref", ep, {"switch_points": [40], "budget": 80, "seeds": [0, 1]})
    report([old], figures=False)
    assert "no reference table" in (old / "summary.md").read_text()
    assert set(pd.read_csv(old / "switches_by_seed.csv")["bar_source"]) == {"best plateau"}


def test_the_clusters_paired_verdict_is_withheld_where_neither_arm_reached_the_bar():
    """With switches in simulated seconds each arm meets a switch at its own episode, so two censored
    values differ by the follow-up, not by realignment: no verdict on such seeds (analysis.cluster)."""
    from analysis.cluster import paired_switches

    rows = []
    for seed in range(5):
        # switch 1: both censored, follow-ups 1,800 against 1,750 + seed (a consistent, meaningless gap)
        rows.append({"arm": "a", "seed": seed, "switch": 1, "episodes_to_bar": 1800.0, "censored": True})
        rows.append({"arm": "b", "seed": seed, "switch": 1, "episodes_to_bar": 1750.0 + seed, "censored": True})
        # switch 2: both reached the bar, a reaches it 100 episodes sooner
        rows.append({"arm": "a", "seed": seed, "switch": 2, "episodes_to_bar": 200.0 + seed, "censored": False})
        rows.append({"arm": "b", "seed": seed, "switch": 2, "episodes_to_bar": 300.0 + 2 * seed, "censored": False})
    table = paired_switches(pd.DataFrame(rows).assign(seconds_to_bar=lambda d: d["episodes_to_bar"] / 40))
    by = {(r.metric, str(r.task)): r for r in table.itertuples()}
    for metric in ("episodes_to_bar", "seconds_to_bar"):
        assert by[(metric, "1")].both_censored == 5 and not by[(metric, "1")].resolved
        assert by[(metric, "1")].verdict == "none: neither reached the bar in 5 seeds"
        assert by[(metric, "2")].both_censored == 0 and by[(metric, "2")].verdict == "a better"
        assert by[(metric, "all")].both_censored == 5 and not by[(metric, "all")].resolved


def test_segment_rows_skip_an_arm_that_never_reached_a_segment():
    """With switches in simulated seconds a slower arm can end its budget before a switch: rliable's
    intervals still list its later segment (n 0), the segments table has no row for it. The report
    showed the other arm's rows and used to stop with a KeyError (a sweep lost its later points)."""
    from analysis.tables.rows import segment_rows

    def interval(arm, task, n, mean):
        return [
            {"arm": arm, "metric": m, "unit": "segment", "task": task, "tasks": str(task), "n": n, "mean": mean}
            for m in ("auc", "dynamic_regret")
        ]

    intervals = pd.DataFrame(
        interval("fast", 0, 2, 0.45)
        + interval("slow", 0, 2, 0.42)
        + interval("fast", 1, 2, 0.1)
        + interval("slow", 1, 0, float("nan"))
    )
    seg = {"target_style": "cute", "start": 0, "end": 300, "best_plateau": 0.5, "best_arm": "fast"}
    segments = pd.DataFrame(
        [
            {"arm": "fast", "seed": 0, "segment": 0, **seg},
            {"arm": "slow", "seed": 0, "segment": 0, **seg},
            {"arm": "fast", "seed": 0, "segment": 1, **seg, "target_style": "chuunibyou", "start": 300},
        ]
    )
    rows = segment_rows(intervals, segments)
    assert [(r[0], r[1].split(":")[0]) for r in rows] == [("fast", "0"), ("slow", "0"), ("fast", "1")]
