"""The report's table rows: the header of each table and its rows as text cells, shared by
summary.md (analysis.tables.summary), the console (analysis.tables.console) and the notebooks. Each cell
is a mean with its 95% interval over seeds ('mean [lo, hi]'), '-' where there is no value."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics import nonstationary
from analysis.phases import switch_label


def _num(x: float, digits: int) -> str:
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.{digits}f}" if digits else f"{x:.0f}"


def fmt_ci(row: pd.Series, metric: str, digits: int = 2) -> str:
    """'mean [lo, hi]', 'mean' (one seed) or '-' (no value)."""
    mean, lo, hi = row.get(metric), row.get(f"{metric}_lo"), row.get(f"{metric}_hi")
    if mean is None or not np.isfinite(mean):
        return "-"
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        return f"{_num(mean, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"
    return _num(mean, digits)


SWITCH_HEADER = [
    "arm",
    "switch",
    "bar (source)",
    "reached bar",
    "episodes to bar (restricted mean)",
    "KM median",
    "judge calls to bar",
    "auc after",
    "plateau -> dip",
    "own plateau: recovered, episodes",
    "old half-life",
    "crossover",
    "new share at end",
    "old share to level",
]
ARM_HEADER = [
    "arm",
    "seeds",
    "episodes",
    "judge calls (failed)",
    "of which warm-up",
    "policy frozen (episodes)",
    "mean reward",
    "final reward",
    "final target share",
]


def km_text(r: pd.Series) -> str:
    """'median [lo, hi]' of the Kaplan-Meier estimate; '>L' where it is not reached within the follow-up L."""
    if not r.get("bar_seeds"):
        return "-"
    beyond = f">{_num(r.get('follow_up'), 0)}"
    med, lo, hi = (r.get(k) for k in ("km_median", "km_median_lo", "km_median_hi"))
    fmt = lambda x: _num(x, 0) if x is not None and np.isfinite(x) else beyond  # noqa: E731
    return f"{fmt(med)} [{fmt(lo)}, {fmt(hi)}]"


def bar_text(r: pd.Series) -> str:
    source = r.get("bar_source") or ""
    return f"{_num(r.get('bar'), 2)} ({source})" if source and source != "none" else "-"


def switch_rows(switches: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in switches.iterrows():
        own = (
            f"{r['recovered_own_plateau']}/{r['seeds_with_data']}, {fmt_ci(r, 'episodes_to_own_plateau', 0)}"
            if r["seeds_with_data"]
            else "n/a"
        )
        rows.append(
            [
                str(r["arm"]),
                f"{r['switch']}: {switch_label(r)} @ {r['t']}",
                bar_text(r),
                f"{r['reached_bar']}/{r['bar_seeds']}" if r["bar_seeds"] else "n/a",
                fmt_ci(r, "episodes_to_bar", 0),
                km_text(r),
                fmt_ci(r, "judge_calls_to_bar", 0),
                fmt_ci(r, "auc_after", 2),
                f"{_num(r['plateau'], 2)} -> {fmt_ci(r, 'dip', 2)}",
                own,
                fmt_ci(r, "old_half_life", 0),
                fmt_ci(r, "crossover", 0),
                fmt_ci(r, "new_share_end", 2),
                fmt_ci(r, "old_fall", 0),
            ]
        )
    return rows


# ----------------------------------------------------------------------------------------------
# non-stationary metrics (analysis/metrics/nonstationary.py): rliable's intervals

SEGMENT_HEADER = ["arm", "segment", "seeds", "reward area", "dynamic regret", "regret against", "best plateau (arm)"]
POOLED_HEADER = ["arm", "metric", "better", "over", "seeds", "mean", "IQM"]
IMPROVEMENT_HEADER = ["metric", "better", "over", "X", "Y", "P(X better than Y)"]  # P(Y better than X) = 1 - it
METRIC_LABELS = {**nonstationary.SWITCH_METRICS, **nonstationary.SEGMENT_METRICS}


def pooled_view(table: pd.DataFrame) -> pd.DataFrame:
    """Per metric, the rows pooled over its tasks ("all"), or its one task's rows where it has one."""
    if table.empty:
        return table
    parts = []
    for _, g in table.groupby("metric", sort=False):
        pooled = g[g["task"].astype(str) == nonstationary.POOLED]
        parts.append(pooled if not pooled.empty else g)
    return pd.concat(parts)


def _over(r: pd.Series) -> str:
    return nonstationary.over_label(r["unit"], r["task"], r["tasks"])


def _judge_of(segment: pd.Series) -> str:
    """', judge v2' for a segment of a run whose schedule changes the judge, else ''."""
    judge = segment.get("judge")
    return f", judge {judge}" if isinstance(judge, str) else ""


def segment_rows(intervals: pd.DataFrame, segments: pd.DataFrame) -> list[list[str]]:
    """Per segment and arm: reward area and dynamic regret (mean [95% CI]) and the best plateau."""
    if intervals.empty or segments.empty:
        return []
    iv = intervals[(intervals["unit"] == "segment") & (intervals["task"].astype(str) != nonstationary.POOLED)]
    info = segments.drop_duplicates(["arm", "segment"]).set_index(["arm", "segment"])
    rows = []
    for (arm, task), g in iv.groupby(["arm", "task"], sort=False):
        if (arm, task) not in info.index:  # switches in simulated seconds: an arm that never reached it
            continue
        m, s = g.set_index("metric"), info.loc[(arm, task)]
        ref = segments[(segments["arm"] == arm) & (segments["segment"] == task)]
        against = (
            f"{_num(ref['reference_reward'].mean(), 3)} ({', '.join(sorted(set(ref['regret_against'])))})"
            if "regret_against" in ref
            else "-"
        )
        rows.append(
            [
                str(arm),
                f"{task}: {s['target_style']}{_judge_of(s)} (t {s['start']}-{s['end']})",
                str(m.loc["auc", "n"]),
                fmt_ci(m.loc["auc"], "mean", 3),
                fmt_ci(m.loc["dynamic_regret"], "mean", 3),
                against,
                f"{_num(s['best_plateau'], 3)} ({s['best_arm']})",
            ]
        )
    return sorted(rows, key=lambda row: int(row[1].split(":")[0]))  # segment by segment, arms side by side


def pooled_rows(intervals: pd.DataFrame) -> list[list[str]]:
    """Per arm and metric, pooled over switches or segments: mean and IQM [95% CI]."""
    view = pooled_view(intervals)
    if view.empty:
        return []
    digits = lambda m: 0 if m in ("episodes_to_bar", "old_fall") else 3  # noqa: E731
    return [
        [
            str(r["arm"]),
            METRIC_LABELS.get(r["metric"], r["metric"]),
            r["better"],
            _over(r),
            str(r["n"]),
            fmt_ci(r, "mean", digits(r["metric"])),
            fmt_ci(r, "iqm", digits(r["metric"])),
        ]
        for _, r in view.sort_values("arm", key=lambda c: c.astype(str), kind="stable").iterrows()
    ]


def improvement_rows(improvement: pd.DataFrame, order: list[str] | None = None) -> list[list[str]]:
    """Per metric and pair of arms, pooled over switches or segments: each pair once, X the arm that
    comes first in `order` (the scenario's; else the table's). P(Y better than X) is the complement,
    1 - P(X better than Y) with the interval mirrored (ties count half), so its row says nothing new;
    improvement.csv keeps both."""
    view = pooled_view(improvement)
    if view.empty:
        return []
    rank = {arm: i for i, arm in enumerate(dict.fromkeys([*(order or []), *view["arm_x"], *view["arm_y"]]))}
    view = view[[rank[x] < rank[y] for x, y in zip(view["arm_x"], view["arm_y"])]]
    return [
        [
            METRIC_LABELS.get(r["metric"], r["metric"]),
            r["better"],
            _over(r),
            str(r["arm_x"]),
            str(r["arm_y"]),
            fmt_ci(r, "p_improvement", 2),
        ]
        for _, r in view.iterrows()
    ]


OFFPOLICY_HEADER = [
    "arm",
    "trained at staleness 0/1/2/3/4+",
    "mean staleness",
    "dropped",
    "judged under a new target",
    "DIS masked",
    "PPO clipped",
]


def offpolicy_rows(offpolicy: pd.DataFrame) -> list[list[str]]:
    def pct(x: float) -> str:
        return "-" if x is None or not np.isfinite(x) else f"{100 * x:.2f}%"

    return [
        [
            str(r["arm"]),
            " / ".join(f"{100 * v:.0f}%" for v in r["staleness_shares"].values()),
            _num(r["staleness_mean"], 2),
            str(r["dropped"]),
            pct(r["crossed_switch"]),
            pct(r["dis_masked_frac"]),
            pct(r["clip_frac"]),
        ]
        for _, r in offpolicy.iterrows()
    ]


TURNS_HEADER = [
    "arm",
    "drafts per episode",
    "accepted early",
    "first-draft reward",
    "last-draft reward",
    "gain",
    "gain, last window",
]


def turns_rows(turns: pd.DataFrame) -> list[list[str]]:
    return [
        [
            str(r["arm"]),
            _num(r["turns"], 2),
            f"{100 * r['accepted_early']:.0f}%",
            _num(r["first_reward"], 3),
            _num(r["final_reward"], 3),
            _num(r["gain"], 3),
            _num(r["gain_end"], 3),
        ]
        for _, r in turns.iterrows()
    ]


def arm_rows(arms: pd.DataFrame) -> list[list[str]]:
    return [
        [
            str(r["arm"]),
            str(r["seeds"]),
            str(r["episodes"]),
            f"{r['judge_calls']} ({r['judge_failures']})",
            str(r.get("warmup_judge_calls", 0)),
            _num(r.get("frozen_policy_episodes", 0.0), 0),
            _num(r["mean_reward"], 3),
            _num(r["final_reward"], 3),
            _num(r["final_target_share"], 2),
        ]
        for _, r in arms.iterrows()
    ]


GOODHART_HEADER = [
    "arm",
    "phase",
    "seeds",
    "training reward",
    "gold reward",
    "gap",
    "withheld share",
    "gap: first -> last window",
]


def goodhart_rows(gaps: pd.DataFrame) -> list[list[str]]:
    rows = []
    for _, r in gaps.iterrows():
        phase = "whole run" if r["phase"] == "all" else f"{r['phase']} [{int(r['start'])}, {int(r['end'])})"
        rise = f"{_num(r['gap_start'], 3)} -> {_num(r['gap_end'], 3)}" if r["phase"] == "all" else ""
        rows.append(
            [
                str(r["arm"]),
                phase,
                str(int(r["seeds"])),
                fmt_ci(r, "reward", 3),
                fmt_ci(r, "gold_reward", 3),
                fmt_ci(r, "gap", 3),
                fmt_ci(r, "withheld", 3),
                rise,
            ]
        )
    return rows
