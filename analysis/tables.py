"""The report's tables as text: markdown for summary.md, a rich table for the console. Each cell
is a mean with its 95% interval over seeds ('mean [lo, hi]'), '-' where there is no value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis import nonstationary, realign
from analysis.markdown import md_table
from analysis.results import Analysis
from analysis.verdicts import lead_lines, paired_markdown


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
                f"{r['switch']}: {r['from_style']} -> {r['to_style']} @ {r['t']}",
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
# non-stationary metrics (analysis/nonstationary.py): rliable's intervals

SEGMENT_HEADER = ["arm", "segment", "seeds", "reward area", "dynamic regret", "regret against", "best plateau (arm)"]
POOLED_HEADER = ["arm", "metric", "better", "over", "seeds", "mean", "IQM"]
IMPROVEMENT_HEADER = ["metric", "better", "over", "X", "Y", "P(X better than Y)"]
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


def segment_rows(intervals: pd.DataFrame, segments: pd.DataFrame) -> list[list[str]]:
    """Per segment and arm: reward area and dynamic regret (mean [95% CI]) and the best plateau."""
    if intervals.empty or segments.empty:
        return []
    iv = intervals[(intervals["unit"] == "segment") & (intervals["task"].astype(str) != nonstationary.POOLED)]
    info = segments.drop_duplicates(["arm", "segment"]).set_index(["arm", "segment"])
    rows = []
    for (arm, task), g in iv.groupby(["arm", "task"], sort=False):
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
                f"{task}: {s['target_style']} (t {s['start']}-{s['end']})",
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


def improvement_rows(improvement: pd.DataFrame) -> list[list[str]]:
    """Per metric and ordered pair of arms, pooled over switches or segments."""
    view = pooled_view(improvement)
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


def definitions(a: Analysis) -> str:
    w = ", ".join(f"{v}" for v in dict.fromkeys(a.windows.values())) or str(realign.DEFAULT_WINDOW)
    horizon = "the whole phase" if a.horizon is None else f"{a.horizon} episodes (capped at the phase)"
    return "\n".join(
        [
            f"- **window** = {w} episodes (rolling mean of the training reward); **fraction** = {a.fraction}; "
            f"**horizon** = {horizon}.",
            "- **plateau**: mean reward of the `window` judged episodes before the switch. "
            "**dip**: the lowest rolling reward over full post-switch windows before the next switch.",
            "- **bar**: fraction x the reference reward of the new phase for the seed (its SFT "
            "policy prompted with the new "
            "target only: 'reference'), or without a reference table fraction x the best pre-switch plateau over the "
            "seed's arms ('best plateau'); the same for every arm of a seed. **reached bar** k/n: seeds whose rolling "
            "reward (post-switch episodes only) reaches it before the next switch. **episodes / judge calls to bar**: "
            "from the switch to the end of that first window (at least `window`); a seed that never reaches it counts "
            "at the phase's length (censored), so the mean is a restricted mean over every seed. **KM median**: the "
            "Kaplan-Meier median with its 95% interval ('>L': not reached within the L episodes followed).",
            "- **auc after**: mean reward of the episodes in [T, T + horizon): the area under the reward curve, no "
            "threshold. **own plateau** (secondary): seeds that reached fraction x their own arm's plateau, and the "
            "episodes to it (censored likewise); a lower plateau makes that bar easier, hence the common bar above.",
            "- **old half-life**: episodes until the old target's held-out share falls to half its "
            "value at the switch. "
            "**crossover**: episodes until the new target's held-out share passes the old one's (both linear between "
            "evaluations). **new share at end**: the new target's held-out share at the phase's last evaluation. "
            f"**old share to level**: episodes until the old target's held-out share falls to {a.old_level} or below "
            "(0 if it already is at the switch).",
            "- Brackets: 95% bootstrap interval over seeds (rliable's, seeds resampled; none with "
            "one seed); '-': no value "
            "(never happened within the phase, or no data). Arms compared seed by seed: the paired "
            "section and paired.csv.",
        ]
    )


def nonstationary_definitions(a: Analysis) -> str:
    return "\n".join(
        [
            "- A **segment** is the stretch between two switches (or the run's start or end). **reward area**: the "
            "mean reward of its judged episodes (the area under the reward curve over its length). **regret against**: "
            "the seed's reference policy reward in the segment ('reference'), or without a reference table the best "
            "plateau ('best arm': the highest mean over seeds, among the arms compared here, of the mean reward of the "
            "last `window` episodes of the segment). **dynamic regret**: that reference - reward, summed over the "
            "segment's episodes and divided by their number (negative for a seed that beat it).",
            "- **mean**, **IQM** (interquartile mean; equal to the mean under four values) over seeds, with rliable's "
            "stratified-bootstrap 95% intervals. A pooled row averages over the switches, or the segments after a "
            "switch (segment 0 is initial learning), in which every seed of every arm has a value, "
            "listed under 'over'.",
            "- **P(X better than Y)**: the probability that a random seed of X beats one of Y (ties count half), "
            "averaged over the switches or segments, with a bootstrap 95% interval; 'better' says whether lower or "
            "higher values are better. 0.5: no difference.",
        ]
    )


def nonstationary_markdown(a: Analysis) -> list[str]:
    """The summary.md section for analysis/nonstationary.py's metrics (empty without them)."""
    if a.intervals.empty:
        return []
    parts = ["## Segments, pooled intervals and probability of improvement", ""]
    seg = segment_rows(a.intervals, a.segments)
    if seg:
        parts += ["### Per segment", "", md_table(SEGMENT_HEADER, seg), ""]
    parts += [
        "### Pooled over switches and segments (rliable)",
        "",
        md_table(POOLED_HEADER, pooled_rows(a.intervals)),
        "",
    ]
    if not a.improvement.empty:
        parts += [
            "### Probability of improvement (rliable)",
            "",
            md_table(IMPROVEMENT_HEADER, improvement_rows(a.improvement)),
            "",
        ]
    parts += [
        "Per switch and segment: intervals.csv, improvement.csv; per seed: segments_by_seed.csv.",
        "",
        nonstationary_definitions(a),
        "",
    ]
    return parts


def summary_markdown(a: Analysis, figures: list[Path], out_dir: Path) -> str:
    parts = ["# Realignment summary", ""]
    lead = lead_lines(a)
    if lead:
        parts += ["## Verdicts: paired differences in episodes to the bar", "", *lead, "", "## Runs", ""]
    for run in a.runs:
        sw = ", ".join(str(s) for s in run.switch_points) or "none"
        note = f" - **{'; '.join(run.notes)}**" if run.notes else ""
        parts.append(
            f"- `{run.name}` ({run.path}): scenario {run.manifest.get('scenario', '?')}, "
            f"budget {run.budget} episodes, seeds {run.seeds}, switches at {sw}{note}"
        )
    parts += ["", "## Arms", "", md_table(ARM_HEADER, arm_rows(a.arms)) if not a.arms.empty else "_no episodes_", ""]
    if not a.turns.empty:
        parts += [
            "## Multi-turn episodes",
            "",
            md_table(TURNS_HEADER, turns_rows(a.turns)),
            "",
            "First-draft reward: the editor's read of the first draft (the episode reward for a one-draft "
            "episode); gain: last-draft minus first-draft reward, what the notes and revisions added.",
            "",
        ]
    if a.asynchronous:
        parts += [
            "## Off-policy data (asynchronous runtime)",
            "",
            md_table(OFFPOLICY_HEADER, offpolicy_rows(a.offpolicy)),
            "",
            "Token shares are means over updates; staleness counts policy versions between generation and training.",
            "",
        ]
    if not a.goodhart.empty:
        parts += [
            "## Goodhart gap (training judge vs gold judge)",
            "",
            md_table(GOODHART_HEADER, goodhart_rows(a.goodhart)),
            "",
            "On the episodes the gold judge scored: mean over seeds [95% interval]. Gap = training reward - gold "
            "reward; withheld share = 1 - gold / training reward (the gap scales with the reward "
            "level, this share does "
            "not); the gap's first and last windows show whether it grew with training (analysis/goodhart.py).",
            "",
        ]
    parts += ["## After each switch", ""]
    if a.switches.empty:
        parts.append("_no switches in these runs_" if all(not r.switch_points for r in a.runs) else "_no data_")
    else:
        parts.append(md_table(SWITCH_HEADER, switch_rows(a.switches)))
    parts += ["", "### How to read it", "", definitions(a), ""]
    parts += paired_markdown(a)
    parts += nonstationary_markdown(a)
    if figures:
        parts += ["## Figures", ""]
        parts += [f"![{f.stem}]({f.relative_to(out_dir).as_posix()})" for f in figures]
        parts.append("")
    return "\n".join(parts)


def rich_table(title: str, header: list[str], rows: list[list[str]]):
    """A console table: the arm column left, the numbers right."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in header:
        table.add_column(col, justify="left" if col == "arm" else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_tables(a: Analysis, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    if a.arms.empty:
        console.print("no episodes recorded")
        return
    title = a.runs[0].name if len(a.runs) == 1 else f"{len(a.runs)} runs"
    console.print(rich_table(f"Arms - {title}", ARM_HEADER, arm_rows(a.arms)))
    if not a.turns.empty:
        console.print(rich_table("Multi-turn episodes", TURNS_HEADER, turns_rows(a.turns)))
    if a.asynchronous:
        console.print(
            rich_table("Off-policy data (asynchronous runtime)", OFFPOLICY_HEADER, offpolicy_rows(a.offpolicy))
        )
    if not a.goodhart.empty:
        console.print(
            rich_table("Goodhart gap (training judge vs gold judge)", GOODHART_HEADER, goodhart_rows(a.goodhart))
        )
    if a.switches.empty:
        console.print("no switches in this run" if len(a.runs) == 1 else "no switches in these runs")
    else:
        _print_switches(a, console)
    for line in lead_lines(a)[:-2]:  # the verdicts, without the note on the bar
        console.print(line, highlight=False, markup=False)
    if not a.intervals.empty:
        seg = segment_rows(a.intervals, a.segments)
        if seg:
            print_rows(
                console, "Segments: reward area and dynamic regret (mean [95% CI] over seeds)", SEGMENT_HEADER, seg
            )
        print_rows(
            console,
            "Pooled over switches and segments (rliable: mean and IQM [95% CI])",
            POOLED_HEADER,
            pooled_rows(a.intervals),
        )
    if not a.improvement.empty:
        print_rows(
            console,
            "Probability of improvement (rliable, [95% CI])",
            IMPROVEMENT_HEADER,
            improvement_rows(a.improvement),
            keys=3,
        )


def print_rows(console, title: str, header: list[str], rows: list[list[str]], keys: int = 2) -> None:
    """A rich table, or on a console under 120 columns one line per row: the first `keys` cells,
    then 'column value' for the others (a squeezed table wraps every cell)."""
    if console.width >= 120:
        console.print(rich_table(title, header, rows))
        return
    console.print(f"{title}:", highlight=False)
    for row in rows:
        rest = ", ".join(f"{h} {v}" for h, v in zip(header[keys:], row[keys:]))
        console.print(f"  {'  '.join(row[:keys])}: {rest}", highlight=False)


def _print_switches(a: Analysis, console) -> None:
    from rich import box
    from rich.table import Table

    title = (
        f"Realignment after each switch (mean [95% CI] over seeds; window "
        f"{', '.join(map(str, dict.fromkeys(a.windows.values())))}, fraction {a.fraction}"
    )
    if console.width < 120:  # a narrow console: one line per arm and switch instead of a squeezed table
        console.print(title + "):", highlight=False)
        for row in switch_rows(a.switches):
            console.print(
                f"  {row[0]}  switch {row[1]}: bar {row[2]}, reached {row[3]}, episodes to bar {row[4]}, "
                f"KM median {row[5]}, judge calls {row[6]}, auc after {row[7]}, plateau -> dip {row[8]}, "
                f"own plateau {row[9]}, old half-life {row[10]}, crossover {row[11]}, new share {row[12]}, "
                f"old share to {a.old_level} {row[13]}",
                highlight=False,
            )
        return
    table = Table(title=title + "; details in summary.md)", box=box.SIMPLE_HEAD)
    short = [
        "arm",
        "switch",
        "bar",
        "reached",
        "episodes to bar",
        "KM median",
        "judge calls",
        "auc after",
        "plateau -> dip",
        "own plateau",
    ]
    for col in short:
        table.add_column(col, justify="left" if col in ("arm", "switch") else "right")
    for row in switch_rows(a.switches):
        table.add_row(row[0], row[1].replace(": ", " ").replace(" @ ", "\n@ "), *row[2:10])
    console.print(table)
