"""Paired comparisons between arms (analysis/stats/paired.py) on tiny cases worked out by hand: the paired
t interval, the paired bootstrap (one resample of seeds for both arms), P(X better), the verdict,
the unpaired fallback, zero-variance differences, the power figures, and, on many synthetic runs
with a planted difference, that the reported resolvable difference is what the test resolves."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.stats import paired


def series(values, seeds=None) -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float), index=list(range(len(values))) if seeds is None else seeds)


# ----------------------------------------------------------------------------------------------
# intervals


def test_paired_t_interval_by_hand():
    x, y = [10.0, 12.0, 14.0, 20.0], [8.0, 11.0, 11.0, 15.0]
    d = np.array([2.0, 1.0, 3.0, 5.0])
    # mean 2.75; squared deviations 0.5625 + 3.0625 + 0.0625 + 5.0625 = 8.75, sd = sqrt(8.75 / 3)
    sd = math.sqrt(8.75 / 3)
    half = stats.t.ppf(0.975, 3) * sd / math.sqrt(4)
    mean, lo, hi = paired.paired_t_interval(d)
    assert (mean, lo, hi) == (pytest.approx(2.75), pytest.approx(2.75 - half), pytest.approx(2.75 + half))
    row = paired.compare(series(x), series(y), "auc_after", "a", "b")
    assert row["pairing"] == "paired" and row["n"] == 4
    assert (row["diff"], row["diff_lo"], row["diff_hi"]) == (
        pytest.approx(2.75),
        pytest.approx(2.75 - half),
        pytest.approx(2.75 + half),
    )
    assert row["sd_diff"] == pytest.approx(sd) and row["se_diff"] == pytest.approx(sd / 2)
    # 2.75 - 2.72 > 0: resolved, and for a reward-like metric higher is better
    assert row["resolved"] and row["verdict"] == "a better"
    # one seed: a point, no interval, nothing resolved
    one = paired.compare(series([3.0]), series([1.0]), "auc_after")
    assert one["diff"] == 2.0 and math.isnan(one["diff_lo"]) and one["verdict"] == "not resolved"


def test_the_paired_bootstrap_resamples_seeds_jointly_where_the_unpaired_one_cannot_see_the_difference():
    # seeds differ a lot (shared SFT luck), the arms differ by ~10 on every seed
    x = [100.0, 200.0, 300.0, 400.0, 500.0]
    y = [89.0, 191.0, 290.0, 392.0, 489.0]  # differences 11, 9, 10, 8, 11
    p = paired.compare(series(x), series(y), "episodes_to_bar", "x", "y", n_boot=2000)
    u = paired.compare(series(x), series(y), "episodes_to_bar", "x", "y", paired=False, n_boot=2000)
    assert p["pairing"] == "paired" and u["pairing"] == "unpaired"
    assert p["diff"] == pytest.approx(9.8) and u["diff"] == pytest.approx(9.8)
    # one resample of seeds for both arms: every resampled mean difference lies in [8, 11]
    assert 8.0 <= p["boot_lo"] < p["boot_hi"] <= 11.0
    assert p["diff_lo"] > 0 and p["resolved"] and p["verdict"] == "y better"  # fewer episodes is better
    # resampling each arm on its own: the seeds' spread swamps the difference
    assert u["boot_lo"] < 0 < u["boot_hi"] and u["diff_lo"] < 0 < u["diff_hi"] and not u["resolved"]
    # Welch by hand
    vx, vy = np.var(x, ddof=1) / 5, np.var(y, ddof=1) / 5
    df = (vx + vy) ** 2 / (vx**2 / 4 + vy**2 / 4)
    half = stats.t.ppf(0.975, df) * math.sqrt(vx + vy)
    assert (u["diff_lo"], u["diff_hi"]) == (pytest.approx(9.8 - half), pytest.approx(9.8 + half))
    # P(x better): x is slower on every seed (paired 0); unpaired it wins the pairs where its seed is lower
    assert p["p_better"] == 0.0 and p["p_better_lo"] == p["p_better_hi"] == 0.0
    assert u["p_better"] == pytest.approx(10 / 25)  # x[i] < y[j] for j > i: 4 + 3 + 2 + 1 pairs


def test_the_paired_bootstrap_interval_against_numpy_by_hand():
    x, y = np.array([5.0, 7.0, 6.0, 9.0]), np.array([4.0, 4.0, 6.0, 5.0])
    out = paired.paired_bootstrap(x, y, lower=False, n_boot=4000, seed=3)
    idx = np.random.default_rng(3).integers(0, 4, size=(4000, 4))
    d = (x[idx] - y[idx]).mean(axis=1)
    assert (out["boot_lo"], out["boot_hi"]) == tuple(pytest.approx(v) for v in np.percentile(d, [2.5, 97.5]))
    score = ((x[idx] > y[idx]) + 0.5 * (x[idx] == y[idx])).mean(axis=1)
    assert (out["p_better_lo"], out["p_better_hi"]) == tuple(
        pytest.approx(v) for v in np.percentile(score, [2.5, 97.5])
    )


def test_probability_of_improvement_counts_seeds_and_half_ties():
    x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 1.0, 5.0]
    assert paired.p_better(x, y, lower=True) == pytest.approx(2.5 / 4)  # seeds 0 and 3, tie on seed 1
    assert paired.p_better(x, y, lower=False) == pytest.approx(1.5 / 4)
    # unpaired: all 16 pairs; x lower in 1<2,1<2,1<5,2<5,3<5,4<5 and ties 1=1, 2=2, 2=2
    assert paired.p_better(x, y, lower=True, paired=False) == pytest.approx((6 + 0.5 * 3) / 16)


def test_differences_that_are_all_equal_do_not_crash_and_decide_by_sign():
    same = paired.compare(series([10.0, 20.0, 30.0]), series([15.0, 25.0, 35.0]), "episodes_to_bar", "a", "b")
    assert (same["diff"], same["diff_lo"], same["diff_hi"]) == (-5.0, -5.0, -5.0)
    assert same["boot_lo"] == same["boot_hi"] == -5.0 and same["sd_diff"] == 0.0 and same["mde"] == 0.0
    assert same["resolved"] and same["verdict"] == "a better"
    assert same["seeds_10pct"] == 2  # no spread: two seeds resolve any difference
    zero = paired.compare(series([1.0, 2.0]), series([1.0, 2.0]), "episodes_to_bar")
    assert zero["diff"] == 0.0 and not zero["resolved"] and zero["verdict"] == "not resolved"
    flat = paired.compare(series([4.0, 4.0]), series([4.0, 4.0]), "auc_after", paired=False)
    assert (flat["diff_lo"], flat["diff_hi"]) == (0.0, 0.0) and flat["verdict"] == "not resolved"


def test_verdict_direction_follows_which_values_are_better():
    assert paired.verdict(-3.0, -1.0, lower=True, arm_x="sao", arm_y="grpo") == "sao better"
    assert paired.verdict(-3.0, -1.0, lower=False, arm_x="sao", arm_y="grpo") == "grpo better"
    assert paired.verdict(1.0, 3.0, lower=True, arm_x="sao", arm_y="grpo") == "grpo better"
    assert paired.verdict(-1.0, 3.0, lower=True, arm_x="sao", arm_y="grpo") == "not resolved"
    assert paired.verdict(float("nan"), 3.0, lower=True, arm_x="sao", arm_y="grpo") == "not resolved"


# ----------------------------------------------------------------------------------------------
# power


def test_minimum_detectable_difference_and_seeds_needed_by_hand():
    sd, n = 60.0, 5
    by_hand = (stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * sd / math.sqrt(n)
    assert paired.min_detectable_difference(sd / math.sqrt(n), n - 1) == pytest.approx(by_hand)
    row = paired.compare(series([100.0, 160.0, 40.0, 130.0, 70.0]), series([0.0] * 5), "auc_after")
    sd_d = np.std([100.0, 160.0, 40.0, 130.0, 70.0], ddof=1)
    assert row["mde"] == pytest.approx((stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * sd_d / math.sqrt(5))

    def brute(sd: float, diff: float) -> int:
        for m in range(2, 1001):
            if (stats.t.ppf(0.975, m - 1) + stats.t.ppf(0.8, m - 1)) * sd / math.sqrt(m) <= diff:
                return m
        return -1

    for sd, diff in ((1.0, 1.0), (150.0, 130.0), (150.0, 26.0), (3.0, 0.5)):
        assert paired.seeds_needed(sd, diff) == brute(sd, diff), (sd, diff)
    assert paired.seeds_needed(1000.0, 1.0) == float("inf")  # more than SEED_CAP
    assert math.isnan(paired.seeds_needed(1.0, 0.0)) and math.isnan(paired.seeds_needed(float("nan"), 1.0))
    # the report's columns: 10% and 20% of the second arm's mean, at the observed sd
    assert math.isnan(row["seeds_10pct"])  # 10% of a zero mean: undefined
    row = paired.compare(series([1100.0, 1160.0, 1040.0, 1130.0, 1070.0]), series([1000.0] * 5), "auc_after")
    assert row["seeds_10pct"] == brute(sd_d, 100.0) and row["seeds_20pct"] == brute(sd_d, 200.0)


def detection_rate(planted: float, n: int, sd: float, runs: int, rng: np.random.Generator) -> tuple[float, float]:
    """Share of synthetic paired runs (n seeds, per-seed differences ~ N(planted, sd), shared seed
    effects on top) resolved in the planted direction, and resolved at all."""
    right = resolved = 0
    for _ in range(runs):
        shared = rng.normal(1000.0, 300.0, size=n)  # the seed's luck, common to both arms
        y = shared
        x = shared + rng.normal(planted, sd, size=n)
        row = paired.compare(series(x), series(y), "auc_after", "x", "y", n_boot=50, seed=1)
        resolved += row["resolved"]
        right += row["verdict"] == "x better"
    return right / runs, resolved / runs


@pytest.mark.parametrize("n", [5, 10])
def test_a_planted_difference_of_twice_the_resolvable_one_is_detected(n):
    rng = np.random.default_rng(20261202 + n)
    sd = 40.0
    pilot = paired.compare(series(rng.normal(0.0, sd, size=n)), series(np.zeros(n)), "auc_after")
    # the reported resolvable difference is the formula at the pilot's sd
    assert pilot["mde"] == pytest.approx(
        (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * pilot["sd_diff"] / math.sqrt(n)
    )
    resolvable = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)  # at the true sd
    right, _ = detection_rate(2 * resolvable, n, sd, 400, rng)
    assert right >= 0.80
    # at the resolvable difference itself the power is about 80% (the definition), not ~100%
    at_mde, _ = detection_rate(resolvable, n, sd, 400, rng)
    assert 0.68 <= at_mde <= 0.90
    # nothing planted: resolved about 5% of the time (the two-sided 5% level)
    _, false_alarm = detection_rate(0.0, n, sd, 400, rng)
    assert 0.01 <= false_alarm <= 0.10


# ----------------------------------------------------------------------------------------------
# a per-seed table: every pair, metric and task


def per_seed_table() -> pd.DataFrame:
    """Three arms, four seeds, two switches; episodes_to_bar by hand."""
    values = {
        "sao": [[100, 300], [120, 320], [140, 340], [160, 360]],
        "rm": [[110, 290], [135, 310], [150, 330], [175, 350]],
        "grpo": [[400, 400], [400, 400], [400, 400], [400, 400]],
    }
    return pd.DataFrame(
        [
            {"run": "r", "arm": arm, "seed": s, "switch": k + 1, "episodes_to_bar": float(v)}
            for arm, seeds in values.items()
            for s, row in enumerate(seeds)
            for k, v in enumerate(row)
        ]
    )


def test_paired_table_compares_every_pair_in_the_given_order_per_task_and_pooled():
    table = paired.paired_table(per_seed_table(), ["episodes_to_bar"], "switch", arms=["sao", "rm", "grpo"], n_boot=500)
    pairs = list(dict.fromkeys(zip(table["arm_x"], table["arm_y"])))
    assert pairs == [("sao", "rm"), ("sao", "grpo"), ("rm", "grpo")]
    assert list(table["task"].astype(str).unique()) == ["1", "2", "all"]
    row = table[(table["arm_x"] == "sao") & (table["arm_y"] == "rm") & (table["task"].astype(str) == "1")].iloc[0]
    assert row["diff"] == pytest.approx(-12.5) and row["pairing"] == "paired" and row["n"] == 4  # -10 -15 -10 -15
    assert row["better"] == "lower" and row["resolved"] and row["verdict"] == "sao better"
    pooled = table[(table["arm_x"] == "sao") & (table["arm_y"] == "rm") & (table["task"] == "all")].iloc[0]
    # per seed the mean over both switches: differences (-10 + 10) / 2, (-15 + 10) / 2, ...
    assert pooled["diff"] == pytest.approx(np.mean([0.0, -2.5, 0.0, -2.5])) and pooled["tasks"] == "1 2"
    assert set(table.columns) == set(paired.PAIRED_COLUMNS)


def test_arms_of_different_runs_or_without_shared_seeds_are_compared_unpaired():
    t = per_seed_table()
    t.loc[t["arm"] == "rm", "run"] = "other"
    table = paired.paired_table(t, ["episodes_to_bar"], "switch", arms=["sao", "rm"], n_boot=200)
    assert set(table["pairing"]) == {"unpaired"}
    t = per_seed_table()
    t.loc[t["arm"] == "rm", "seed"] += 10  # seeds 10..13: none shared
    table = paired.paired_table(t, ["episodes_to_bar"], "switch", arms=["sao", "rm"], n_boot=200)
    assert set(table["pairing"]) == {"unpaired"} and set(table["n_x"]) == {4} and set(table["n_y"]) == {4}


def test_the_pooled_segment_row_leaves_segment_0_out():
    rows = [
        {"arm": arm, "seed": s, "segment": k, "dynamic_regret": v}
        for arm, vals in {"a": [0.9, 0.1, 0.2], "b": [0.1, 0.3, 0.4]}.items()
        for s in range(3)
        for k, v in enumerate(vals)
    ]
    table = paired.paired_table(pd.DataFrame(rows), ["dynamic_regret"], "segment", n_boot=200)
    pooled = table[table["task"] == "all"].iloc[0]
    assert pooled["tasks"] == "1 2" and pooled["diff"] == pytest.approx(-0.2)  # with segment 0: (0.8 - 0.2 - 0.2) / 3


def test_a_one_seed_verdict_line_says_there_is_no_interval():
    from analysis.tables.verdicts import verdict_line

    row = pd.Series(
        {
            "metric": "episodes_to_bar",
            "unit": "switch",
            "task": 1,
            "arm_x": "sao",
            "arm_y": "rm",
            **paired.compare(series([100.0]), series([250.0]), "episodes_to_bar", "sao", "rm"),
        }
    )
    line = verdict_line(row, ("cute", "chuunibyou"))
    assert line == (
        "Switch 1 (cute → chuunibyou): sao − rm: −150 episodes to the bar with one seed: no interval, nothing "
        "resolved (run more seeds)."
    )


def test_a_seed_censored_in_both_arms_at_different_follow_ups_withholds_the_verdict_but_a_tie_does_not():
    """Two censoring times that differ measure the follow-ups (each arm met the switch at its own
    episode), not realignment; two equal ones (a schedule in episodes) are a tie."""
    rows = []
    for seed in range(6):
        # switch 1: a reaches the bar 100 episodes sooner on every seed
        rows += [("a", seed, 1, 200.0 + seed, False, "recovered"), ("b", seed, 1, 300.0 + seed, False, "recovered")]
        # switch 2: as switch 1, but seed 3 censored in both at the same follow-up (a tie)
        rows += [("a", seed, 2, 200.0 + seed, False, "recovered"), ("b", seed, 2, 300.0 + seed, False, "recovered")]
        # switch 3: as switch 1, but seed 3 censored in both at follow-ups 900 and 950
        rows += [("a", seed, 3, 200.0 + seed, False, "recovered"), ("b", seed, 3, 300.0 + seed, False, "recovered")]
    table = pd.DataFrame(rows, columns=["arm", "seed", "switch", "episodes_to_bar", "censored", "status"])
    at = {(a, s, t): i for i, (a, s, t) in enumerate(zip(table["arm"], table["seed"], table["switch"]))}
    for arm, value in (("a", 800.0), ("b", 800.0)):
        table.loc[at[(arm, 3, 2)], ["episodes_to_bar", "censored", "status"]] = [value, True, "not recovered"]
    for arm, value in (("a", 900.0), ("b", 950.0)):
        table.loc[at[(arm, 3, 3)], ["episodes_to_bar", "censored", "status"]] = [value, True, "not recovered"]
    table["episodes_to_own_plateau"] = table["episodes_to_bar"]
    got = paired.paired_table(table, ["episodes_to_bar", "episodes_to_own_plateau"], "switch")
    by = {(r.metric, str(r.task)): r for r in got.itertuples()}
    for metric in ("episodes_to_bar", "episodes_to_own_plateau"):
        assert by[(metric, "1")].both_censored == 0 and by[(metric, "1")].verdict == "a better"
        assert by[(metric, "2")].both_censored == 0 and by[(metric, "2")].verdict == "a better"  # the tie stays in
        assert by[(metric, "2")].n == 6 and by[(metric, "2")].diff == pytest.approx(-500 / 6)
        blind = by[(metric, "3")]
        assert blind.both_censored == 1 and not blind.resolved
        assert blind.verdict == "none: neither reached the bar in 1 seeds" and np.isfinite(blind.diff_lo)
        assert by[(metric, "all")].both_censored == 1 and not by[(metric, "all")].resolved
