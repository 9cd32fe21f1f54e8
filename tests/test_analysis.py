"""Realignment metrics on small hand-built tables whose answers are known, and the report on thin
run directories (one arm, one seed, no switches, no evaluations)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.figures.plots import arm_palette, style_palette
from analysis.metrics import curves, realign
from analysis.metrics import summary as realign_summary
from analysis.metrics import training as training_data
from analysis.report import load_run, print_switch_table, report
from testbed.store import RunStore


def episodes(rewards, arm="rm", seed=0, switch_points=(200,), targets=("cute", "chuunibyou"), t0=0):
    t = np.arange(t0, t0 + len(rewards))
    phase = np.searchsorted(np.asarray(switch_points), t, side="right")
    return pd.DataFrame(
        {
            "arm": arm,
            "seed": seed,
            "t": t,
            "target_style": [targets[p] for p in phase],
            "reward": np.asarray(rewards, dtype=float),
            "judge_error": None,
        }
    )


def recovering(n_dip=50, budget=400, switch=200):
    """1 before the switch, 0 for n_dip episodes after it, then 1 again."""
    r = np.ones(budget)
    r[switch : switch + n_dip] = 0.0
    return r


def evals_table(rows, arm="rm", seed=0):
    """rows: (t, target, {style: share})."""
    out = []
    for t, target, shares in rows:
        for style, share in shares.items():
            out.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "t": t,
                    "style": style,
                    "share": share,
                    "n": 10,
                    "eval_reward": shares.get(target, 0.0),
                    "eval_quality": 1.0,
                    "target_style": target,
                }
            )
    return pd.DataFrame(out)


def test_recovers_at_a_known_episode():
    m = realign.switch_metrics(episodes(recovering()), [200], 400, window=10, fraction=0.9, horizon=100)
    row = m.iloc[0]
    assert (row["switch"], row["t"], row["from_style"], row["to_style"]) == (1, 200, "cute", "chuunibyou")
    assert row["status"] == "recovered" and bool(row["recovered_own_plateau"])
    assert row["plateau"] == 1.0 and row["threshold"] == pytest.approx(0.9)
    # post-switch windows of 10: the first with >= 9 ones ends at post-switch index 58 (t = 258)
    assert row["episodes_to_own_plateau"] == 59
    assert row["judge_calls_to_own_plateau"] == 59  # no updates table: one call per episode row
    assert row["dip"] == 0.0 and row["dip_at"] == 10
    assert row["auc_after"] == pytest.approx(0.5) and row["horizon_episodes"] == 100


def test_fraction_and_window_are_parameters():
    ep = episodes(recovering())
    strict = realign.switch_metrics(ep, [200], 400, window=10, fraction=1.0).iloc[0]
    assert strict["episodes_to_own_plateau"] == 60  # all ten ones: window ends at index 59
    wide = realign.switch_metrics(ep, [200], 400, window=20, fraction=0.5).iloc[0]
    assert wide["episodes_to_own_plateau"] == 60  # 10 ones of 20 at index 59


def test_never_recovers_is_censored_at_the_phase_length_not_dropped():
    r = np.ones(400)
    r[200:] = 0.0
    row = realign.switch_metrics(episodes(r), [200], 400, window=10).iloc[0]
    assert row["status"] == "not recovered" and not row["recovered_own_plateau"]
    # censored at the 200 episodes of the phase (400 - 200), judge calls likewise
    assert row["episodes_to_own_plateau"] == 200 and row["judge_calls_to_own_plateau"] == 200
    assert row["episodes_to_bar"] == 200 and row["censored"] and not row["reached_bar"]
    assert row["follow_up"] == 200
    assert row["dip"] == 0.0 and row["auc_after"] == 0.0
    agg = realign_summary.aggregate(realign.switch_metrics(episodes(r), [200], 400, window=10)).iloc[0]
    assert agg["recovered_own_plateau"] == 0 and agg["seeds_with_data"] == 1
    assert agg["episodes_to_own_plateau"] == 200 and agg["episodes_to_bar"] == 200
    assert (agg["reached_bar"], agg["bar_seeds"]) == (0, 1)


def test_a_plateau_that_was_never_learned_is_not_a_recovery():
    # 5% reward before the switch, 10% after: "recovering 90% of 0.05" would be trivially true
    r = np.where(np.arange(400) < 200, 0.05, 0.10)
    row = realign.switch_metrics(episodes(r), [200], 400, window=10).iloc[0]
    assert row["plateau"] < realign.MIN_PLATEAU
    assert row["status"] == "no plateau" and not row["recovered_own_plateau"]


def test_missing_seeds_are_counted_not_invented():
    ep = pd.concat([episodes(recovering(50), seed=0), episodes(recovering(70), seed=1)])
    m = realign.switch_metrics(ep, [200], 400, window=10, seeds=[0, 1, 2])
    assert list(m["seed"]) == [0, 1, 2]
    assert list(m["status"]) == ["recovered", "recovered", "no data"]
    agg = realign_summary.aggregate(m).iloc[0]
    assert (agg["seeds"], agg["seeds_with_data"], agg["recovered_own_plateau"]) == (3, 2, 2)
    assert agg["episodes_to_own_plateau"] == pytest.approx((59 + 79) / 2)
    assert agg["episodes_to_own_plateau_n"] == 2
    assert agg["episodes_to_own_plateau_lo"] <= agg["episodes_to_own_plateau"] <= agg["episodes_to_own_plateau_hi"]
    assert agg["episodes_to_own_plateau_lo"] >= 59 and agg["episodes_to_own_plateau_hi"] <= 79


def test_single_seed_has_a_mean_and_no_interval():
    agg = realign_summary.aggregate(realign.switch_metrics(episodes(recovering()), [200], 400, window=10)).iloc[0]
    assert agg["seeds"] == 1 and agg["episodes_to_own_plateau"] == 59
    assert math.isnan(agg["episodes_to_own_plateau_lo"]) and math.isnan(agg["episodes_to_own_plateau_hi"])


def test_switch_with_no_data_after_it():
    ep = episodes(np.ones(200), switch_points=(200, 300), targets=("cute", "chuunibyou", "classical"))
    m = realign.switch_metrics(ep, [200, 300], 400, window=10)
    assert list(m["status"]) == ["no data", "no data"]
    assert list(m["episodes_after"]) == [0, 0]
    assert m["plateau"].iloc[0] == 1.0 and math.isnan(m["plateau"].iloc[1])
    assert m[["dip", "auc_after", "episodes_to_own_plateau"]].isna().all().all()
    agg = realign_summary.aggregate(m)
    assert list(agg["seeds_with_data"]) == [0, 0] and list(agg["recovered_own_plateau"]) == [0, 0]


def test_failed_judge_calls_are_excluded_but_counted():
    ep = episodes(recovering())
    ep.loc[ep["t"].between(200, 209), ["reward", "judge_error"]] = [np.nan, "timeout"]
    row = realign.switch_metrics(ep, [200], 400, window=10, fraction=0.9).iloc[0]
    # ten failed episodes: the judged ones after the switch start at t = 210
    assert row["recovered_own_plateau"] and row["episodes_to_own_plateau"] == 59
    assert row["judge_calls_to_own_plateau"] == 59


def test_judge_calls_come_from_the_updates_table():
    ep = episodes(recovering())
    updates = pd.DataFrame(
        {
            "arm": "rm",
            "seed": 0,
            "update": range(1, 41),
            "t": np.arange(10, 410, 10),
            "judge_calls": np.arange(10, 410, 10) * 4,
        }
    )  # e.g. GRPO, four samples per prompt
    row = realign.switch_metrics(ep, [200], 400, updates=updates, window=10).iloc[0]
    assert row["judge_calls_to_own_plateau"] == pytest.approx(4 * 59)


def test_half_life_and_crossover_from_held_out_shares():
    ev = evals_table(
        [
            (0, "cute", {"cute": 0.5, "chuunibyou": 0.5}),
            (200, "chuunibyou", {"cute": 1.0, "chuunibyou": 0.0}),
            (300, "chuunibyou", {"cute": 0.8, "chuunibyou": 0.2}),
            (400, "chuunibyou", {"cute": 0.2, "chuunibyou": 0.8}),
        ]
    )
    row = realign.switch_metrics(episodes(recovering(), switch_points=(200,)), [200], 500, evals=ev, window=10).iloc[0]
    assert row["old_share_at_switch"] == 1.0
    assert row["old_half_life"] == pytest.approx(150.0)  # 0.8 -> 0.2 crosses 0.5 halfway
    assert row["crossover"] == pytest.approx(150.0)  # -0.6 -> +0.6 crosses 0 halfway
    assert row["new_share_end"] == pytest.approx(0.8)


def test_old_style_that_never_fades_is_censored_at_the_phases_end_not_dropped():
    ev = evals_table(
        [(t, "chuunibyou" if t >= 200 else "cute", {"cute": 0.9, "chuunibyou": 0.1}) for t in (0, 100, 200, 300)]
    )
    row = realign.switch_metrics(episodes(recovering()), [200], 400, evals=ev, window=10).iloc[0]
    assert row["old_half_life"] == 200 and row["old_half_life_censored"]  # the phase's 200 episodes
    assert row["crossover"] == 200 and row["crossover_censored"]


def test_a_seed_that_never_halves_counts_in_the_paired_comparison():
    """Two seeds: in seed 1 arm b's old style never halves. Dropping it (NaN) would leave one seed
    and no interval; censored at the phase's end (300 episodes) it counts, against a's 66.7 (its
    share 0.8 at the switch halves to 0.4 two thirds of the way to 0.2 at the next evaluation)."""
    from analysis.stats.paired import paired_table

    rows = []
    for arm, shares in (("a", [1.0, 0.8, 0.2, 0.2]), ("b", [1.0, 1.0, 1.0, 0.9])):
        for seed in (0, 1):
            fade = shares if seed == 1 else [1.0, 0.8, 0.2, 0.2]
            ev = evals_table(
                [(t, "chuunibyou" if t >= 200 else "cute", {"cute": s, "chuunibyou": 1 - s})
                 for t, s in zip((100, 200, 300, 400), fade)]
            )  # fmt: skip
            row = realign.switch_metrics(
                episodes(recovering(), switch_points=(200,)), [200], 500, evals=ev, window=10
            ).iloc[0]
            rows.append({"arm": arm, "seed": seed, "switch": 1, **row[["old_half_life", "old_half_life_censored"]]})
    table = pd.DataFrame(rows)
    assert table["old_half_life"].notna().all() and table["old_half_life_censored"].sum() == 1
    result = paired_table(table, ["old_half_life"], "switch", arms=["a", "b"]).iloc[0]
    assert result["n"] == 2 and result["diff"] == pytest.approx((0 + (200 / 3 - 300)) / 2)


def test_bootstrap_ci_sanity():
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 20):
        x = rng.normal(size=n)
        mean, lo, hi = realign.bootstrap_ci(x)
        # symmetric samples at 95%: the percentiles happen to bracket the mean (nothing forces them to)
        assert mean == pytest.approx(x.mean()) and lo <= mean <= hi and lo >= x.min() and hi <= x.max()
    assert realign.bootstrap_ci([0.7, 0.7, 0.7]) == (pytest.approx(0.7), pytest.approx(0.7), pytest.approx(0.7))
    mean, lo, hi = realign.bootstrap_ci([3.0, float("nan")])
    assert mean == 3.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in realign.bootstrap_ci([]))
    # reproducible
    assert realign.bootstrap_ci([1, 2, 3, 9]) == realign.bootstrap_ci([1, 2, 3, 9])


def test_bootstrap_ci_is_the_bootstraps_percentiles_and_can_miss_the_mean():
    # a skewed sample: the bootstrap distribution of its mean is right-skewed, so its middle lies
    # below the mean, and a narrow (low-confidence) percentile interval misses the mean
    x = 2.5 ** np.arange(8)  # 1, 2.5, ..., 610.4; mean 127.07
    boot = np.random.default_rng(0).choice(x, size=(200_000, 8)).mean(axis=1)
    assert np.percentile(boot, 52.5) < x.mean()  # by hand: the middle 5% lies under the mean
    for seed in (0, 1, 2):
        mean, lo, hi = realign.bootstrap_ci(x, confidence=0.05, seed=seed)
        assert mean == pytest.approx(x.mean()) and lo < hi < mean  # a clamped interval would end at the mean
    mean, lo, hi = realign.bootstrap_ci(x)  # at 95% it is wide and asymmetric
    assert lo < mean < hi and mean - lo < hi - mean


def test_bootstrap_ci_does_not_stretch_an_interval_to_the_mean(monkeypatch):
    from analysis.stats import bootstrap

    monkeypatch.setattr(bootstrap, "bootstrap_mean", lambda x, reps, confidence, seed: (5.0, 6.0))
    assert realign.bootstrap_ci([1.0, 2.0, 3.0]) == (2.0, 5.0, 6.0)


def two_arms_one_seed(hi_after=(50, 1.0), lo_after=(30, 0.5)):
    """Arm 'hi' (plateau 1.0) and arm 'lo' (plateau 0.5) of seed 0, switch at 200 of 400: after the
    switch each is 0 for n episodes, then at its new level."""

    def arm(name, before, zeros, level):
        r = np.full(400, float(before))
        r[200 : 200 + zeros] = 0.0
        r[200 + zeros :] = level
        return episodes(r, arm=name)

    return pd.concat([arm("hi", 1.0, *hi_after), arm("lo", 0.5, *lo_after)], ignore_index=True)


def reference_table(rewards: dict[int, list[float]], arms=("hi", "lo")) -> pd.DataFrame:
    """rewards[seed][phase], the same row for every arm (as the runs write it)."""
    return pd.DataFrame(
        [
            {
                "arm": arm,
                "seed": seed,
                "phase": k,
                "start": 0,
                "end": 0,
                "target_style": "x",
                "candidates": "x",
                "samples": 64,
                "reward": r,
                "quality": 1.0,
                "target_share": 1.0,
            }
            for arm in arms
            for seed, phases in rewards.items()
            for k, r in enumerate(phases)
        ]
    )


def test_the_bar_is_common_to_the_arms_of_a_seed_so_a_low_plateau_is_no_easier():
    ep = two_arms_one_seed()
    m = realign.switch_metrics(ep, [200], 400, window=10, fraction=0.9).set_index("arm")
    # own plateau: lo needs 0.45 (9 of 10 at 0.5: post index 38, 39 episodes); hi needs 0.9 (59)
    assert (m.loc["lo", "threshold"], m.loc["hi", "threshold"]) == (pytest.approx(0.45), pytest.approx(0.9))
    assert (m.loc["lo", "episodes_to_own_plateau"], m.loc["hi", "episodes_to_own_plateau"]) == (39, 59)
    # the common bar without a reference table: 0.9 x the best plateau of the seed's arms (1.0)
    assert list(m["bar"]) == [pytest.approx(0.9)] * 2 and set(m["bar_source"]) == {"best plateau"}
    assert m.loc["hi", "episodes_to_bar"] == 59 and m.loc["hi", "reached_bar"] and not m.loc["hi", "censored"]
    # lo plateaus at 0.5 < 0.9: it never reaches the bar and is censored at the phase's 200 episodes
    assert m.loc["lo", "episodes_to_bar"] == 200 and m.loc["lo", "censored"] and not m.loc["lo", "reached_bar"]
    assert m.loc["lo", "judge_calls_to_bar"] == 200


def test_the_bar_comes_from_the_reference_table_when_there_is_one():
    ep = two_arms_one_seed()
    ref = reference_table({0: [1.0, 0.5]})  # phase 1's reference policy earns 0.5: the bar is 0.45
    m = realign.switch_metrics(ep, [200], 400, window=10, fraction=0.9, reference=ref).set_index("arm")
    assert list(m["bar"]) == [pytest.approx(0.45)] * 2 and set(m["bar_source"]) == {"reference"}
    # hi: 5 ones of 10 reach 0.45 at post index 54 (55 episodes); lo: 9 of 10 at 0.5 (39)
    assert (m.loc["hi", "episodes_to_bar"], m.loc["lo", "episodes_to_bar"]) == (55, 39)
    assert not m["censored"].any() and m["reached_bar"].all()
    # the reference is the mean over arms; a seed missing from the table falls back on its own
    ep1 = pd.concat([ep, ep.assign(seed=1)], ignore_index=True)
    ref = pd.concat([reference_table({0: [1.0, 0.5]}, arms=("hi",)), reference_table({0: [1.0, 0.7]}, arms=("lo",))])
    m = realign.switch_metrics(ep1, [200], 400, window=10, fraction=0.9, reference=ref).set_index(["arm", "seed"])
    assert m.loc[("hi", 0), "bar"] == pytest.approx(0.9 * 0.6) and m.loc[("lo", 0), "bar"] == pytest.approx(0.54)
    assert m.loc[("hi", 1), "bar_source"] == "best plateau" and m.loc[("hi", 1), "bar"] == pytest.approx(0.9)


def test_censored_seeds_count_in_the_restricted_mean_and_the_kaplan_meier_median():
    ep = pd.concat(
        [
            episodes(recovering(50), seed=0),
            episodes(recovering(70), seed=1),
            episodes(np.r_[np.ones(200), np.zeros(200)], seed=2),
        ]
    )
    m = realign.switch_metrics(ep, [200], 400, window=10)
    assert list(m["episodes_to_bar"]) == [59, 79, 200] and list(m["censored"]) == [False, False, True]
    agg = realign_summary.aggregate(m).iloc[0]
    # the restricted mean keeps the censored seed at 200 (dropping it would say 69)
    assert agg["episodes_to_bar"] == pytest.approx((59 + 79 + 200) / 3) and agg["episodes_to_bar_n"] == 3
    assert (agg["reached_bar"], agg["bar_seeds"], agg["follow_up"]) == (2, 3, 200)
    # Kaplan-Meier: S = 2/3 after 59, 1/3 after 79: the median is 79
    assert agg["km_median"] == 79 and agg["km_median_lo"] <= 79
    assert agg["horizon_reward"] == agg["auc_after"]  # the older name, kept


def test_kaplan_meier_median_by_hand():
    from analysis.metrics.recovery import km_median

    assert km_median([1, 2, 3, 4], [False] * 4)[0] == 2  # S(2) = 0.5
    # S: 0.8 after 1, 0.6 after 2, 3 censored (3 at risk -> 2), 0.3 after 4: the median is 4
    med, lo, hi = km_median([1, 2, 3, 4, 5], [False, False, True, False, True])
    assert med == 4 and lo <= med and (math.isnan(hi) or hi >= med)
    assert all(math.isnan(v) for v in km_median([200, 200], [True, True]))  # nobody reached it
    assert all(math.isnan(v) for v in km_median([], []))


def test_auc_after_is_the_mean_reward_over_the_horizon():
    r = np.ones(400)
    r[200:] = (np.arange(200, 400) - 200) / 200  # a ramp from 0 after the switch
    row = realign.switch_metrics(episodes(r), [200], 400, window=10, horizon=100).iloc[0]
    assert row["auc_after"] == pytest.approx(np.arange(100).mean() / 200) and row["horizon_episodes"] == 100
    whole = realign.switch_metrics(episodes(r), [200], 400, window=10, horizon=None).iloc[0]
    assert whole["auc_after"] == pytest.approx(np.arange(200).mean() / 200) and whole["horizon_episodes"] == 200
    capped = realign.switch_metrics(episodes(r), [200], 400, window=10, horizon=1000).iloc[0]
    assert capped["auc_after"] == whole["auc_after"]


def test_judge_call_curves_start_at_the_warm_up_calls():
    ep = pd.concat([episodes(recovering(), arm="sao"), episodes(recovering(), arm="rm")])
    updates = pd.concat(
        [
            pd.DataFrame(
                {
                    "arm": arm,
                    "seed": 0,
                    "update": range(1, 41),
                    "t": np.arange(10, 410, 10),
                    "judge_calls": np.arange(10, 410, 10),
                    "warmup_judge_calls": warm,
                }
            )
            for arm, warm in (("sao", 2048), ("rm", 0))
        ],
        ignore_index=True,
    )
    sao_up = updates[updates["arm"] == "sao"]
    count = curves.judge_call_counter(ep[ep["arm"] == "sao"], sao_up)
    assert count(0) == 2048 and count(100) == 2148
    assert curves.judge_call_counter(ep[ep["arm"] == "sao"], sao_up.drop(columns="warmup_judge_calls"))(100) == 100
    curve = curves.judge_call_curve(ep, updates, window=10).sort_values("t")
    first = curve.groupby("arm")["judge_calls"].min()
    assert first["sao"] - first["rm"] == 2048 and first["rm"] < 20
    ov = realign_summary.arm_overview(ep, updates=updates).set_index("arm")
    assert (ov.loc["sao", "judge_calls"], ov.loc["sao", "warmup_judge_calls"]) == (400 + 2048, 2048)
    assert ov.loc["rm", "judge_calls"] == 400
    # calls *to* the bar are a difference: the warm-up does not enter them
    m = realign.switch_metrics(ep, [200], 400, updates=updates, window=10).set_index("arm")
    assert m.loc["sao", "judge_calls_to_bar"] == m.loc["rm", "judge_calls_to_bar"] == 59


def test_auto_window_shrinks_for_short_runs():
    assert realign.auto_window([2400, 4200], 6000) == 128
    assert realign.auto_window([38, 67], 96) == 7
    assert realign.auto_window([], 10) == 2
    assert realign.auto_window([2400], 6000, window=50) == 50


def test_rolling_reward_has_a_value_per_judged_episode():
    ep = episodes(recovering())
    roll = curves.rolling_reward(ep, 10)
    assert len(roll) == 400 and roll["rolling_reward"].isna().sum() == 1  # the first: under a quarter-window
    assert roll["rolling_reward"].iloc[209] == 0.0 and roll["rolling_reward"].iloc[-1] == 1.0


def test_colours_are_stable():
    a = arm_palette(["sao", "running_mean", "custom"])
    b = arm_palette(["custom", "running_mean", "sao"])
    assert a["sao"] == b["sao"] and a["running_mean"] == b["running_mean"] and len(set(a.values())) == 3
    assert style_palette(["cute"])["cute"] == style_palette(["classical", "cute"])["cute"]


# ----------------------------------------------------------------------------------------------
# the report on thin run directories


def write_run(root, name, ep, manifest, evals=None, updates=None, reference=None):
    store = RunStore(root / name, flush_rows=10_000)
    if not ep.empty:
        store.append("episodes", ep.to_dict("records"))
    if reference is not None:
        store.append("reference", reference.to_dict("records"))
    if evals is not None:
        store.append("evals", evals.to_dict("records"))
    if updates is not None:
        store.append("updates", updates.to_dict("records"))
    store.flush()
    store.write_manifest({"scenario": "hand", "status": "done", "seeds": [0], **manifest})
    return store.root


def test_report_on_a_thin_run(tmp_path, capsys):
    # one arm, one seed, no switches, no evaluations, no updates
    run = write_run(
        tmp_path,
        "thin",
        episodes(np.r_[np.zeros(50), np.ones(50)], switch_points=(), targets=("cute",)),
        {"switch_points": [], "budget": 100},
    )
    out = report([run])
    assert out == run
    assert (run / "summary.md").read_text().count("no switches") == 1
    summary = pd.read_csv(run / "summary.csv")
    assert list(summary["arm"]) == ["rm"] and summary["final_reward"].iloc[0] == 1.0
    assert (run / "figures" / "realignment.png").stat().st_size > 0
    assert not (run / "figures" / "critic_diagnostics.png").exists()
    print_switch_table(run)
    assert "no switches" in capsys.readouterr().out


def test_report_on_an_empty_run_and_a_comparison(tmp_path):
    empty = write_run(tmp_path, "empty", pd.DataFrame(), {"switch_points": [40], "budget": 100, "status": "failed"})
    out = report([empty], figures=False)
    assert "status: failed" in (out / "summary.md").read_text()
    ep = pd.concat([episodes(recovering(10, 100, 40), seed=s, switch_points=(40,)) for s in (0, 1)])
    two = write_run(tmp_path, "two", ep, {"switch_points": [40], "budget": 100, "seeds": [0, 1]})
    comparison = report([two, empty], out_dir=tmp_path / "cmp")
    assert comparison == tmp_path / "cmp"
    summary = pd.read_csv(comparison / "summary.csv")
    assert set(summary["arm"]) == {"two:rm"}
    assert summary["recovered_own_plateau"].iloc[0] == 2
    assert (comparison / "figures" / "realignment_speed.png").exists()
    assert load_run(two).seeds == [0, 1]


def test_nothing_to_recover_when_the_plateau_is_zero():
    r = np.zeros(400)
    r[300:] = 1.0
    row = realign.switch_metrics(episodes(r), [200], 400, window=10).iloc[0]
    assert (
        row["status"] == "no plateau"
        and not row["recovered_own_plateau"]
        and math.isnan(row["episodes_to_own_plateau"])
    )
    agg = realign_summary.aggregate(realign.switch_metrics(episodes(r), [200], 400, window=10)).iloc[0]
    assert agg["seeds_with_data"] == 0


# ----------------------------------------------------------------------------------------------
# target_share.png: one segment per phase, every phase shaded


def test_target_share_never_joins_targets_across_a_switch_and_shades_every_phase(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    switches, budget = (200, 300), 400
    targets = ("cute", "chuunibyou", "classical")
    rewards = np.r_[np.ones(200), np.zeros(100), np.ones(100)]
    ep = pd.concat([episodes(rewards, seed=s, switch_points=switches, targets=targets) for s in (0, 1)])
    # evaluations in the first and last phase only: nothing is measured in the middle one
    rows = [
        (0, "cute", {"cute": 0.2, "classical": 0.1}),
        (100, "cute", {"cute": 0.9, "classical": 0.0}),
        (300, "classical", {"cute": 0.9, "classical": 0.1}),
        (350, "classical", {"cute": 0.3, "classical": 0.7}),
    ]
    ev = pd.concat([evals_table(rows, seed=s) for s in (0, 1)])
    run = write_run(
        tmp_path, "sparse", ep, {"switch_points": list(switches), "budget": budget, "seeds": [0, 1]}, evals=ev
    )
    drawn = {}
    real_savefig = Figure.savefig
    monkeypatch.setattr(
        Figure,
        "savefig",
        lambda fig, path, **kw: (drawn.__setitem__(Path(path).stem, fig), real_savefig(fig, path, **kw))[1],
    )
    report([run])
    fig = drawn["target_share"]
    bounds = [0, *switches, budget]
    phase = lambda t: np.searchsorted(switches, t, side="right")  # noqa: E731
    for ax in fig.axes[:2]:
        segments = [line.get_xdata() for line in ax.get_lines() if len(set(line.get_xdata())) > 1]
        assert len(segments) == 2  # one arm, two phases with evaluations
        assert all(phase(min(x)) == phase(max(x)) for x in segments), segments
        spans = sorted((p.get_x(), p.get_x() + p.get_width()) for p in ax.patches)
        assert spans == list(zip(bounds, bounds[1:]))
    top = {t.get_text() for t in fig.axes[0].texts}
    assert {"target: cute", "target: chuunibyou", "target: classical"} <= top  # the middle phase, from episodes
    share_at = {
        round(float(x), 6): float(y)
        for line in fig.axes[0].get_lines()
        if len(set(line.get_xdata())) > 1
        for x, y in zip(line.get_xdata(), line.get_ydata())
    }  # the segments, not the switch lines
    assert share_at[100] == pytest.approx(0.9) and share_at[300] == pytest.approx(0.1)


def test_offpolicy_overview_counts_staleness_drops_and_switch_crossings():
    ep = episodes(np.ones(8), switch_points=(4,))
    ep["staleness"] = [0, 0, 1, 1, 2, 5, 6, 0]  # 5 and 6 land in the 4+ bin
    ep["generation_target"] = ["cute", "cute", "cute", "cute", "cute", "cute", "chuunibyou", "chuunibyou"]
    ep["trained"] = True
    failed = ep.iloc[[0]].assign(t=99, judge_error="timeout", staleness=None, trained=False)  # not judged: not counted
    dropped_row = ep.iloc[[1]].assign(t=98, staleness=7, trained=False)  # judged, dropped: no staleness share
    ep = pd.concat([ep, failed, dropped_row], ignore_index=True)
    updates = pd.DataFrame({"arm": "rm", "seed": 0, "dis_masked_frac": [0.1, 0.3], "clip_frac": [np.nan, np.nan]})
    dropped = pd.DataFrame({"arm": ["rm", "rm", "other"], "t": [1, 2, 3]})
    (row,) = training_data.offpolicy_overview(ep, updates, dropped).to_dict("records")
    assert row["episodes"] == 9
    assert row["staleness_shares"] == {"0": 3 / 8, "1": 2 / 8, "2": 1 / 8, "3": 0.0, "4+": 2 / 8}
    assert row["staleness_mean"] == pytest.approx(15 / 8)
    assert row["dropped"] == 2
    assert row["crossed_switch"] == pytest.approx(2 / 9)  # t=4, 5 generated for cute, judged for chuunibyou
    assert row["dis_masked_frac"] == pytest.approx(0.2) and math.isnan(row["clip_frac"])


def test_report_shows_offpolicy_data_only_for_asynchronous_runs(tmp_path):
    ep = episodes(recovering(10, 100, 40), switch_points=(40,)).assign(staleness=0, generation_target="cute")
    sync = write_run(tmp_path, "sync", ep, {"switch_points": [40], "budget": 100})
    report([sync], figures=False)
    assert "Off-policy" not in (sync / "summary.md").read_text() and not (sync / "offpolicy.csv").exists()
    stale = write_run(
        tmp_path, "async", ep.assign(staleness=np.arange(100) % 3), {"switch_points": [40], "budget": 100}
    )
    report([stale], figures=False)
    text = (stale / "summary.md").read_text()
    assert "Off-policy data" in text and "34% / 33% / 33% / 0% / 0%" in text
    assert pd.read_csv(stale / "offpolicy.csv")["staleness_mean"].iloc[0] == pytest.approx(0.99)


def test_turns_overview_measures_what_revising_added():
    ep = episodes(np.array([1.0, 1.0, 0.0, 1.0]), switch_points=(100,))
    ep["turns"] = [1, 2, 3, 2]
    # accepted at draft 1 (read once, scored again); revised once, then accepted; three drafts, ran
    # out; two drafts with max_turns 2, ran out (read once)
    ep["editor_calls"] = [1, 2, 2, 1]
    ep["turn_rewards"] = ["1", "0;1", "0;0", "0"]
    (row,) = training_data.turns_overview(ep, window=2).to_dict("records")
    assert row["turns"] == 2.0 and row["accepted_early"] == 0.5
    assert row["first_reward"] == pytest.approx((1 + 0 + 0 + 0) / 4) and row["final_reward"] == 0.75
    assert row["gain"] == pytest.approx(0.5)
    assert row["final_reward_end"] == 0.5 and row["first_reward_end"] == 0.0 and row["gain_end"] == 0.5
    single = episodes(np.ones(4)).assign(turns=1, editor_calls=0, turn_rewards="")
    assert training_data.turns_overview(single).empty


def test_critic_ev_curve_ignores_one_exploded_batch_but_the_loss_curve_is_a_mean():
    """One batch with (almost) constant rewards has EV ~ -1000; a rolling mean would sink the
    whole window, the rolling median keeps the curve where the other updates are."""
    from analysis.figures.diagnostics import _smooth

    ev = [0.5, 0.6, -1000.0, 0.55, 0.5, 0.6]
    updates = pd.DataFrame(
        {
            "arm": "sao",
            "seed": 0,
            "t": range(0, 192, 32),
            "value_explained_variance": ev,
            "critic_loss": [1.0, 1.0, 7.0, 1.0, 1.0, 1.0],
        }
    )
    smooth = _smooth(updates, ["value_explained_variance", "critic_loss"], span=5, points=1000).set_index("t")
    assert smooth["value_explained_variance"].min() > 0.4  # the median of every window
    assert smooth.loc[160, "critic_loss"] == pytest.approx(11 / 5)  # the mean of 1, 7, 1, 1, 1


def test_the_critic_only_warm_up_is_counted_in_episodes():
    from analysis.metrics.summary import frozen_policy_episodes

    sao = pd.DataFrame({"update": [1, 2, 3, 4], "t": [32, 64, 96, 128], "value_warmup": [1.0, 1.0, None, None]})
    assert frozen_policy_episodes(sao) == 64  # the policy stood still through episode 64
    rm = pd.DataFrame({"update": [1, 2], "t": [32, 64], "policy_loss": [0.1, 0.2]})
    assert frozen_policy_episodes(rm) == 0
    late = pd.DataFrame({"update": [1, 2, 3], "t": [32, 64, 96], "policy_loss": [None, None, 0.3]})
    assert frozen_policy_episodes(late) == 64


def test_seed_means_average_each_seeds_events():
    from analysis.metrics.summary import seed_means

    per_seed = pd.DataFrame(
        {
            "run": "r",
            "arm": ["a"] * 4,
            "seed": [0, 0, 1, 1],
            "switch": [1, 2, 1, 2],
            "episodes_to_bar": [100, 300, 50, 50],
        }
    )
    segments = pd.DataFrame(
        {"run": "r", "arm": ["a"] * 4, "seed": [0, 0, 1, 1], "segment": [0, 1, 0, 1], "auc": [0.9, 0.5, 0.9, 0.7]}
    )
    out = seed_means(per_seed, segments).set_index("seed")
    assert out.loc[0, "episodes_to_bar"] == 200 and out.loc[1, "episodes_to_bar"] == 50 and out.loc[0, "events"] == 2
    assert out.loc[0, "segment_auc"] == 0.5  # segment 0 (before any switch) is not an event
