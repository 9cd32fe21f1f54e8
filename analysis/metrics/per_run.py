"""The non-stationary metrics (analysis/metrics/nonstationary.py) and the paired comparisons
(analysis/stats/paired.py) over a report's runs: runs that share a schedule are grouped, so their
segments share one best plateau (the fallback reference) and their arms are compared in one
bootstrap. Used by analysis.report.analyse."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.metrics import nonstationary
from analysis.metrics import phases as pair_phases
from analysis.stats import paired


def schedule_groups(runs: list[Any]) -> list[list[Any]]:
    """The runs grouped by schedule (switch points, budget, targets), in order: the arms of one
    group share segments and switches, so they are compared with each other."""
    groups: dict[tuple, list[Any]] = {}
    for run in runs:
        groups.setdefault(run.schedule_key(), []).append(run)
    return list(groups.values())


def _with_old_fall(per_seed: pd.DataFrame, falls: pd.DataFrame, old_level: float) -> pd.DataFrame:
    """The switch table with `old_level` and `old_fall` (NaN where a seed had no evaluations)."""
    if falls.empty:
        return per_seed.assign(old_level=old_level, old_fall=float("nan"))
    keys = ["arm", "seed", "switch"]
    return per_seed.merge(falls[[*keys, "old_level", "old_fall"]], on=keys, how="left").assign(old_level=old_level)


def _labelled(df: pd.DataFrame, run: Any, labelled: bool) -> pd.DataFrame:
    """The table with a `run` column and, for several runs, arms labelled 'run:arm'."""
    arm = run.name + ":" + df["arm"].astype(str) if labelled else df["arm"]
    return df.assign(arm=arm, run=run.name)


def _cat(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    dfs = [d for d in dfs if d is not None and not d.empty]
    return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame()


def _group_tables(group: list[Any], labelled: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The group's episodes and reference tables, each with `run` (and labelled arms)."""
    eps = [_labelled(r.episodes, r, labelled) for r in group if not r.episodes.empty]
    refs = [
        _labelled(r.reference, r, labelled)
        for r in group
        if getattr(r, "reference", None) is not None and not r.reference.empty and "arm" in r.reference
    ]
    return _cat(eps), _cat(refs)


def _nonstationary(
    runs: list[Any],
    per_seed: pd.DataFrame,
    windows: dict[str, int],
    labelled: bool,
    reps: int,
    arm_order: list[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per schedule group: the segment table (regret against each run's reference table, else the
    best plateau over all the group's arms), rliable's intervals and probabilities of improvement
    over its switches and segments, and the paired comparisons (`analysis.stats.paired`) of its arms in
    `arm_order`: (segments, intervals, improvement, paired)."""
    segments, intervals, improvement, pairs = [], [], [], []
    for group in schedule_groups(runs):
        head, names = group[0], [r.name for r in group]
        ep, ref = _group_tables(group, labelled)
        sp = pair_phases.group_switches(group, labelled, ep) if not ep.empty else head.switch_points
        seg = nonstationary.segment_metrics(ep, sp, head.budget, windows[head.name], reference=ref)
        if not seg.empty:
            seg.insert(0, "run", seg["arm"].map(ep.groupby("arm")["run"].first()))
            segments.append(seg)
        sw = per_seed[per_seed["run"].isin(names)] if not per_seed.empty else per_seed
        intervals += [
            nonstationary.interval_estimates(sw, list(nonstationary.SWITCH_METRICS), "switch", reps),
            nonstationary.interval_estimates(seg, list(nonstationary.SEGMENT_METRICS), "segment", reps),
        ]
        improvement += [
            nonstationary.probability_of_improvement(sw, [nonstationary.IMPROVEMENT_METRICS["switch"]], "switch", reps),
            nonstationary.probability_of_improvement(
                seg, [nonstationary.IMPROVEMENT_METRICS["segment"]], "segment", reps
            ),
        ]
        pairs += [
            paired.paired_table(sw, None, "switch", arm_order),
            paired.paired_table(seg, None, "segment", arm_order),
        ]
    return _cat(segments), _cat(intervals), _cat(improvement), _cat(pairs)
