"""The non-stationary metrics (analysis/nonstationary.py) over a report's runs: runs that share a
schedule are grouped, so their segments share one best plateau and their arms are compared in one
bootstrap. Used by analysis.report.analyse."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import nonstationary


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


def _nonstationary(runs: list[Any], per_seed: pd.DataFrame, windows: dict[str, int], labelled: bool,
                   reps: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per schedule group: the segment table (the best plateau over all the group's arms), and
    rliable's intervals and probabilities of improvement over its switches and segments."""
    segments, intervals, improvement = [], [], []
    for group in schedule_groups(runs):
        head, names = group[0], [r.name for r in group]
        parts = []
        for run in group:
            if not run.episodes.empty:
                arm = run.episodes["arm"].astype(str)
                parts.append(run.episodes.assign(arm=run.name + ":" + arm if labelled else run.episodes["arm"],
                                                 run=run.name))
        ep = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        seg = nonstationary.segment_metrics(ep, head.switch_points, head.budget, windows[head.name])
        if not seg.empty:
            seg.insert(0, "run", seg["arm"].map(ep.groupby("arm")["run"].first()))
            segments.append(seg)
        sw = per_seed[per_seed["run"].isin(names)] if not per_seed.empty else per_seed
        intervals += [nonstationary.interval_estimates(sw, list(nonstationary.SWITCH_METRICS), "switch", reps),
                      nonstationary.interval_estimates(seg, list(nonstationary.SEGMENT_METRICS), "segment", reps)]
        improvement += [
            nonstationary.probability_of_improvement(sw, [nonstationary.IMPROVEMENT_METRICS["switch"]], "switch", reps),
            nonstationary.probability_of_improvement(seg, [nonstationary.IMPROVEMENT_METRICS["segment"]], "segment",
                                                     reps),
        ]

    def cat(dfs: list[pd.DataFrame]) -> pd.DataFrame:
        dfs = [d for d in dfs if not d.empty]
        return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame()

    return cat(segments), cat(intervals), cat(improvement)
