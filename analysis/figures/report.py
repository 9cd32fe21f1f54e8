"""The report's figures of a group of runs that share a schedule (`_figure_jobs`, used by
`analysis.report.make_figures`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from analysis import goodhart
from analysis.metrics import phases as pair_phases
from analysis.metrics import realign
from analysis.results import Analysis
from analysis.run_data import RunData

PAIR_NOTE = "dotted lines: each arm x seed's own switch (schedule in simulated seconds)"


def _marked(fig, pairs: pair_phases.Switches):
    """`fig` with each arm x seed's switch dotted on every panel (a panel titled '... - <arm> (...)'
    shows that arm's pairs only), no target named over the run-wide phase, and a note saying so;
    unchanged for one list of switches."""
    if fig is None or not isinstance(pairs, Mapping) or not pair_phases.has_switches(pairs):
        return fig
    arms = {str(arm) for arm, _ in pairs}
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        m = re.search(r" - (.+) \(", ax.get_title(loc="left"))
        only = [m.group(1)] if m and m.group(1) in arms else None
        pair_phases.mark_pair_switches(ax, pairs, only)
        for text in list(ax.texts):  # one run-wide "phase" has no single target: do not name one
            if text.get_text().startswith("target: "):
                text.remove()
    fig.text(0.99, 0.995, PAIR_NOTE, fontsize=7, color="#555555", ha="right", va="top")
    return fig


def _concat(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    dfs = [d for d in dfs if not d.empty]
    return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame()


def _figure_jobs(
    a: Analysis, group: list[RunData], palette, labelled: bool = False
) -> list[tuple[str, Callable[[], Any]]]:
    """(name, draw) for each figure of a group of runs that share a schedule: `draw` makes the
    figure when called, so that make_figures can catch its failure. Runs with per-pair switches
    (a schedule in simulated seconds) have no common phases to tint: their figures on the drift
    clock dot each arm x seed's own switch instead (`_marked`)."""
    from analysis.figures import nonstationary as nonstationary_plots
    from analysis.figures import plots

    head = group[0]
    sp, budget = head.switch_points, head.budget
    window = a.windows.get(head.name)
    ep = _concat([r.episodes for r in group])
    up = _concat([r.updates for r in group])
    ev = _concat([r.evals for r in group])
    title = head.name if len(group) == 1 else f"{len(group)} runs"
    pairs = pair_phases.group_switches(group, labelled, ep) if not ep.empty else sp
    jobs: list[tuple[str, Callable[[], Any]]] = [
        (
            "realignment",
            lambda: _marked(plots.realignment_figure(ep, ev, sp, budget, window, title=title, palette=palette), pairs),
        ),
        (
            "target_share",
            lambda: _marked(
                plots.target_share_figure(
                    ev, sp, budget, palette=palette, title=title, targets=realign.phase_targets(ep, ev, sp, budget)
                ),
                pairs,
            ),
        ),
        (
            "reward_vs_judge_calls",
            lambda: plots.judge_calls_figure(ep, up, sp, budget, window, palette=palette, title=title),
        ),
        ("training_diagnostics", lambda: _marked(plots.training_figure(up, sp, budget, palette=palette), pairs)),
        ("critic_diagnostics", lambda: _marked(plots.critic_figure(up, sp, budget, palette=palette), pairs)),
        (
            "goodhart_gap",
            lambda: goodhart.gap_figure(
                ep,
                sp,
                budget,
                realign.auto_window(sp, budget, window),
                palette=palette,
                targets=realign.phase_targets(ep, ev, sp, budget),
                pair_switches=pairs,
            ),
        ),
    ]
    # the non-stationary tables of this group's arms (the arm labels are unique across runs)
    mine = set(a.arms.loc[a.arms["run"].isin([r.name for r in group]), "arm"]) if not a.arms.empty else set()
    seg, iv, imp = (
        df[df[col].isin(mine)] if not df.empty else df
        for df, col in ((a.segments, "arm"), (a.intervals, "arm"), (a.improvement, "arm_x"))
    )
    jobs += [
        ("segments", lambda: nonstationary_plots.segment_figure(seg, iv, palette=palette)),
        ("probability_of_improvement", lambda: nonstationary_plots.improvement_figure(imp)),
    ]
    return jobs
