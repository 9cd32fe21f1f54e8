"""The report's tables as markdown for summary.md: the definitions, the non-stationary metrics and
the whole summary. The rows are analysis.tables.rows' (importable from here too, as the notebooks
do); the console's tables are analysis.tables.console'."""

from __future__ import annotations

from pathlib import Path

from analysis.judge_calls import judge_calls, judge_calls_markdown
from analysis.metrics import realign
from analysis.results import Analysis
from analysis.tables.console import print_rows, print_tables, rich_table  # noqa: F401  (importable here)
from analysis.tables.markdown import md_table
from analysis.tables.rows import (
    ARM_HEADER,
    GOODHART_HEADER,
    IMPROVEMENT_HEADER,
    OFFPOLICY_HEADER,
    POOLED_HEADER,
    SEGMENT_HEADER,
    SWITCH_HEADER,
    TURNS_HEADER,
    arm_rows,
    goodhart_rows,
    improvement_rows,
    offpolicy_rows,
    pooled_rows,
    segment_rows,
    switch_rows,
    turns_rows,
)
from analysis.tables.verdicts import lead_lines, paired_markdown


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
    """The summary.md section for analysis/metrics/nonstationary.py's metrics (empty without them)."""
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
            md_table(IMPROVEMENT_HEADER, improvement_rows(a.improvement, a.arm_order)),
            "",
            "Each pair once: P(Y better than X) = 1 − P(X better than Y) (ties count half); improvement.csv has both.",
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
    parts += judge_calls_markdown(judge_calls(a.runs))  # a schedule that changes the judge
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
