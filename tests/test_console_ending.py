"""The short ending of a run on the console (analysis/tables/brief.py), the probability-of-improvement
rows once per pair, the time line (testbed/cli/run_end.py) and the SFT acceptance warning
(testbed/models/sft_bar.py): hand-built tables, hand-written expected lines."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from analysis.results import Analysis
from analysis.tables import brief as console_brief
from analysis.tables.rows import improvement_rows
from testbed.cli.run_end import Stopwatch, duration
from testbed.models.sft_bar import bar_warning, shortfall
from testbed.scenario.schema import PolicyConfig

ARMS = ["sao", "running_mean", "grpo"]
NBSP = "\N{NO-BREAK SPACE}"  # inside an interval, so that a folded line never splits it


def pair(task, x, y, diff, lo, hi, verdict, n=5):
    return {
        "unit": "switch",
        "metric": "episodes_to_bar",
        "task": task,
        "arm_x": x,
        "arm_y": y,
        "n": n,
        "n_x": n,
        "n_y": n,
        "diff": diff,
        "diff_lo": lo,
        "diff_hi": hi,
        "resolved": verdict.endswith(" better"),
        "verdict": verdict,
        "pairing": "paired",
    }


def analysis(paired_rows: list[dict], seeds: int = 5) -> Analysis:
    per_seed = pd.DataFrame(
        [
            {"arm": arm, "seed": 0, "switch": k, "t": t, "from_style": a, "to_style": b}
            for arm in ARMS
            for k, t, a, b in ((1, 2400, "cute", "chuunibyou"), (2, 4200, "chuunibyou", "classical"))
        ]
    )
    arms = pd.DataFrame(
        {
            "arm": sorted(ARMS),  # the report's tables are sorted by name; the ending keeps the scenario's order
            "seeds": seeds,
            "final_reward": [0.79, 0.805, 0.8249],
            "window": 200,
        }
    )
    return Analysis(
        runs=[],
        per_seed=per_seed,
        switches=pd.DataFrame(),
        arms=arms,
        summary=pd.DataFrame(),
        windows={},
        fraction=0.9,
        horizon=None,
        labelled=False,
        paired=pd.DataFrame(paired_rows),
        arm_order=ARMS,
    )


def test_one_line_per_switch_with_the_resolved_pairs_and_how_many_are_not():
    a = analysis(
        [
            pair(1, "sao", "running_mean", 39, -24, 101, "not resolved"),
            pair(1, "sao", "grpo", -232, -439, -26, "sao better"),
            pair(1, "running_mean", "grpo", -200, -380, -20, "running_mean better"),
            pair(2, "sao", "running_mean", 57, -101, 214, "not resolved"),
            pair(2, "sao", "grpo", 80, 10, 150, "grpo better"),  # X − Y > 0: Y is the faster
            pair(2, "running_mean", "grpo", 20, -60, 100, "not resolved"),
            pair("all", "sao", "grpo", -70, -200, 60, "not resolved"),  # pooled: not a switch's line
        ]
    )
    assert console_brief.switch_lines(a) == [
        "verdicts on episodes to the bar after each switch, paired over 5 seeds (95% intervals; in full: summary.md):",
        f"switch 1 (cute → chuunibyou at t=2400): sao faster than grpo by 232 [26,{NBSP}439]; running_mean faster than "
        f"grpo by 200 [20,{NBSP}380]; the other pair not resolved",
        f"switch 2 (chuunibyou → classical at t=4200): grpo faster than sao by 80 [10,{NBSP}150]; the 2 other pairs "
        "not resolved",
    ]


def test_no_verdict_with_one_seed_and_none_where_neither_arm_reached_the_bar():
    one_seed = analysis(
        [
            pair(k, x, y, 10, np.nan, np.nan, "not resolved", n=1)
            for k in (1, 2)
            for x, y in (("sao", "running_mean"), ("sao", "grpo"), ("running_mean", "grpo"))
        ],
        seeds=1,
    )
    assert console_brief.switch_lines(one_seed) == [
        "switch 1 (cute → chuunibyou at t=2400): one seed: no verdict",
        "switch 2 (chuunibyou → classical at t=4200): one seed: no verdict",
    ]
    blind = analysis(
        [
            pair(1, "sao", "running_mean", 0, 0, 0, "none: neither reached the bar in 3 seeds"),
            pair(1, "sao", "grpo", 5, -9, 19, "not resolved"),
            pair(1, "running_mean", "grpo", 2, -9, 13, "not resolved"),
        ]
    )
    assert console_brief.switch_lines(blind)[1:] == [
        "switch 1 (cute → chuunibyou at t=2400): no pair resolved; no verdict: sao vs running_mean (neither reached "
        "the bar in 3 seeds)",
        "switch 2 (chuunibyou → classical at t=4200): no paired comparison",  # no rows for switch 2
    ]


def test_final_rewards_in_the_scenarios_order_and_every_line_within_120_columns(tmp_path):
    a = analysis([pair(1, "sao", "grpo", -232, -439, -26, "sao better")])
    assert console_brief.reward_line(a) == (
        "final reward (last 200 episodes, mean over 5 seeds): sao 0.82, running_mean 0.81, grpo 0.79"
    )
    (tmp_path / "summary.csv").write_text("")
    figures = [tmp_path / "figures" / name for name in ("segments.png", "realignment.png")]
    lines = console_brief.brief_lines(a, tmp_path, figures)
    said = " ".join(line.strip() for line in lines)  # a long scratch path folds the first line
    assert said.startswith(
        f"report in {tmp_path}: summary.md (every table), figures/ (2: realignment.png first), 1 CSV tables "
        "verdicts on episodes to the bar"
    )
    assert "switch 1 (cute → chuunibyou at t=2400): sao faster than grpo by 232" in said
    assert said.endswith(
        "switch 2 (chuunibyou → classical at t=4200): no paired comparison " + console_brief.reward_line(a)
    )
    assert len(lines) <= 6 and all(len(line) <= 120 for line in lines)
    long = "switch 1 (cute → chuunibyou at t=2400): " + "; ".join(["a_rather_long_arm_name faster than another"] * 5)
    folded = console_brief.fold(long)
    assert len(folded) == 3 and all(len(p) <= 120 and p.startswith("    ") and p[4] != " " for p in folded[1:])
    assert " ".join(p.strip() for p in folded) == long


def test_probability_of_improvement_rows_list_each_pair_once_in_the_scenarios_order():
    rows = [
        {
            "metric": "episodes_to_bar",
            "better": "lower",
            "unit": "switch",
            "task": "all",
            "tasks": "1 2",
            "arm_x": x,
            "arm_y": y,
            "p_improvement": p,
            "p_improvement_lo": p - 0.1,
            "p_improvement_hi": p + 0.1,
        }
        for x, y, p in [
            ("grpo", "sao", 0.3),
            ("sao", "grpo", 0.7),
            ("running_mean", "sao", 0.45),
            ("sao", "running_mean", 0.55),
            ("grpo", "running_mean", 0.4),
            ("running_mean", "grpo", 0.6),
        ]
    ]
    shown = improvement_rows(pd.DataFrame(rows), ARMS)
    assert [(r[3], r[4], r[5]) for r in shown] == [
        ("sao", "grpo", "0.70 [0.60, 0.80]"),
        ("sao", "running_mean", "0.55 [0.45, 0.65]"),
        ("running_mean", "grpo", "0.60 [0.50, 0.70]"),
    ]


def test_the_time_line_counts_from_the_commands_start_with_each_part():
    assert [duration(s) for s in (3.27, 52.4, 112, 3725)] == ["3.3 s", "52 s", "1 min 52 s", "1 h 2 min"]
    clock = Stopwatch(started=time.time() - 124.6)  # the command started 2 min 5 s ago (within 0.9 s)
    clock.laps = {"SFT": 31.0, "arms": 62.0, "report": 9.0}
    assert clock.line() == "time: 2 min 5 s (SFT 31 s, arms 1 min 2 s, report 9.0 s)"
    lap = Stopwatch()
    assert 0 <= lap.lap("SFT") < 5 and list(lap.laps) == ["SFT"]


def test_the_sft_warning_says_what_missed_what_it_means_and_what_to_change():
    cfg = PolicyConfig.model_validate({"sft": {"steps": 500, "max_rounds": 1}})
    report = {"quality": 0.34375, "style_shares": {"cute": 0.5, "academic": 0.3, "chuunibyou": 0.15, "classical": 0.05}}
    archetypes = ["academic", "cute", "chuunibyou", "classical"]
    assert shortfall(report, cfg, archetypes) == (
        "below the acceptance bar: quality 0.34 (bar 0.80), classical written 0.05 (bar 0.10)"
    )
    said = bar_warning(report, cfg, archetypes)
    assert said.startswith("warning: after 1 round(s) of 500 steps the SFT policy is below the acceptance bar")
    assert "fail the judge's quality check" in said and "raise policy.sft.steps or policy.sft.max_rounds" in said
    styles_only = bar_warning({**report, "quality": 0.9}, cfg, archetypes)
    assert (
        "classical written 0.05" in styles_only and "seldom writes" in styles_only and "quality 0.90" not in styles_only
    )
