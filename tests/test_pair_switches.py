"""A run whose (arm, seed) pairs switch at different episodes (a schedule in simulated seconds):
segments, regret, the old style's fall and the Goodhart gap per pair, on hand-built tables; and a
report of such a run (the run-level `switch_points` empty, the pairs' own in the manifest)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import goodhart
from analysis.metrics import nonstationary as ns
from analysis.metrics import phases as pair_phases
from analysis.report import report
from tests.test_analysis import episodes, evals_table, write_run

TARGETS = ("cute", "chuunibyou")
# arm a seed 0 switches at 30, seed 1 at 50; arm b seed 0 at 40 (80 episodes each)
PAIRS = {("a", 0): [30], ("a", 1): [50], ("b", 0): [40]}


def pair_run() -> pd.DataFrame:
    """Reward 1 before the pair's own switch, 0.5 after it; gold reward 0.5 before, 0 after."""
    parts = []
    for (arm, seed), (s,) in PAIRS.items():
        ep = episodes(np.r_[np.ones(s), np.full(80 - s, 0.5)], arm=arm, seed=seed, switch_points=(s,), targets=TARGETS)
        parts.append(ep.assign(gold_reward=np.r_[np.full(s, 0.5), np.zeros(80 - s)]))
    return pd.concat(parts, ignore_index=True)


def by_key(table: pd.DataFrame, *keys) -> dict:
    return {tuple(r[k] for k in keys): r for _, r in table.iterrows()}


def test_segments_and_regret_per_pair():
    seg = by_key(ns.segment_metrics(pair_run(), PAIRS, 80, window=5), "arm", "seed", "segment")
    assert len(seg) == 6
    for (arm, seed), (s,) in PAIRS.items():
        first, second = seg[arm, seed, 0], seg[arm, seed, 1]
        assert (first["start"], first["end"], second["start"], second["end"]) == (0, s, s, 80)
        assert (first["episodes"], second["episodes"]) == (s, 80 - s)
        assert (first["auc"], second["auc"]) == (1.0, 0.5)  # a run-level split would mix the phases
        assert (first["target_style"], second["target_style"]) == TARGETS
        assert second["dynamic_regret"] == 0.0  # every arm's plateau is the best one, 0.5
    # with the run-level list instead (switch at 40 for all): seed a/0's second segment mixes
    mixed = by_key(ns.segment_metrics(pair_run(), [40], 80, window=5), "arm", "seed", "segment")
    assert mixed["a", 1, 1]["auc"] == pytest.approx((10 * 1.0 + 30 * 0.5) / 40)


def test_old_fall_per_pair_switch():
    ev = pd.concat(
        [
            evals_table(
                [(0, "cute", {"cute": 0.8}), (30, "chuunibyou", {"cute": 0.8}), (40, "chuunibyou", {"cute": 0.0})],
                "a",
                0,
            ),
            evals_table(
                [(0, "cute", {"cute": 0.8}), (50, "chuunibyou", {"cute": 0.8}), (60, "chuunibyou", {"cute": 0.0})],
                "a",
                1,
            ),
        ]
    )
    falls = by_key(ns.old_fall(ev, PAIRS, 80, pair_run(), old_level=0.4), "arm", "seed")
    assert falls["a", 0]["t"] == 30 and falls["a", 1]["t"] == 50
    assert falls["a", 0]["old_fall"] == pytest.approx(5.0) and falls["a", 1]["old_fall"] == pytest.approx(5.0)
    assert (falls["a", 1]["from_style"], falls["a", 1]["to_style"]) == TARGETS


def test_goodhart_gap_per_pair_phase():
    out = by_key(goodhart.gap_overview(pair_run(), PAIRS, 80), "arm", "phase")
    # phase 1 of each pair: reward 1, gold 0.5; phase 2: reward 0.5, gold 0 -> gap 0.5 everywhere,
    # withheld 0.5 then 1.0 (a run-level split would blend them)
    assert out["a", "1"]["gap"] == pytest.approx(0.5) and out["a", "1"]["withheld"] == pytest.approx(0.5)
    assert out["a", "2"]["withheld"] == pytest.approx(1.0) and out["b", "2"]["withheld"] == pytest.approx(1.0)
    assert (out["a", "1"]["start"], out["a", "1"]["end"], out["a", "2"]["start"]) == (0, 50, 30)
    assert out["a", "1"]["scored"] == 30 + 50


def test_group_switches_label_the_pairs():
    class Run:
        def __init__(self, name, switches, ep):
            self.name, self.switches, self.switch_points, self.episodes = name, switches, [], ep

    ep = pair_run()
    sim, epi = Run("sim", PAIRS, ep), Run("epi", [40], ep[ep["arm"] == "b"])
    epi.switch_points = [40]
    both = pair_phases.group_switches([sim, epi], True, ep)
    assert both[("sim:a", 1)] == [50] and both[("epi:b", 0)] == [40]
    assert pair_phases.group_switches([epi], False, ep) == [40]


def test_report_of_a_run_on_simulated_time(tmp_path):
    ep = pair_run()
    arms = {arm: {} for arm, _ in PAIRS}
    for (arm, seed), points in PAIRS.items():
        arms[arm][str(seed)] = {"switch_points": points, "switch_seconds": [1.0 * p for p in points]}
    run = write_run(tmp_path, "sim", ep, {"switch_points": [], "budget": 80, "seeds": [0, 1], "arms": arms})
    out = report([run], tmp_path / "out", window=5, figures=False)
    seg = pd.read_csv(out / "segments_by_seed.csv")
    a1 = seg[(seg["arm"] == "a") & (seg["seed"] == 1)].set_index("segment")
    assert a1.loc[1, "start"] == 50 and a1.loc[1, "auc"] == 0.5
    gap = pd.read_csv(out / "goodhart.csv")
    assert set(gap["phase"].astype(str)) == {"all", "1", "2"}


def test_baseline_overview_per_pair_phase():
    from analysis.metrics.training import baseline_overview

    own = {("a", 0): [30], ("a", 1): [50]}
    up = pd.DataFrame(
        [
            {"arm": "a", "seed": seed, "t": t, "reward_mean": float(t > s)}
            for (_, seed), (s,) in own.items()
            for t in range(5, 81, 5)
        ]
    )
    out = baseline_overview(up, own, 80).set_index("phase")
    assert out.loc[1, "updates"] == 6 + 10 and out.loc[2, "updates"] == 10 + 6
    assert out.loc[1, "reward_mean"] == 0.0 and out.loc[2, "reward_mean"] == 1.0


def test_figures_mark_each_pairs_switch():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.figures.report import PAIR_NOTE, _marked

    fig, (per_arm, shared) = plt.subplots(2, 1)
    per_arm.set_title("Held-out style shares - a (2 seeds)", loc="left")
    per_arm.text(40, 1.0, "target: cute")
    _marked(fig, PAIRS)
    assert sorted(line.get_xdata()[0] for line in per_arm.lines) == [30, 50]  # arm a's pairs only
    assert sorted(line.get_xdata()[0] for line in shared.lines) == [30, 40, 50]
    assert not per_arm.texts and any(t.get_text() == PAIR_NOTE for t in fig.texts)
    plain = plt.figure()
    plain.add_subplot()
    assert _marked(plain, [40]) is plain and not plain.axes[0].lines  # one list: the figure's own dashes
    plt.close("all")
