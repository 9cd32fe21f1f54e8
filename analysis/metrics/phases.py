"""The phases of one arm x seed, for the report parts that split a run at its switches (segments,
the old style's fall, the Goodhart gap, the figures' switch marks).

A run's switch points are one list for every arm and seed (a schedule in episodes) or one list per
(arm, seed) (`RunData.switches` of a schedule in simulated seconds: each pair meets a switch at its
own episode). With one list every pair has the same phases and targets (the targets taken over all
arms, as before); with a mapping each pair's phases are its own and its targets come from its own
episodes and evaluations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis.metrics.realign import phase_bounds, phase_targets
from analysis.metrics.recovery import Switches, switch_count, switches_for

__all__ = ["Switches", "group_switches", "has_switches", "mark_pair_switches", "pair_schedule", "shared_targets"]


def has_switches(switch_points: Switches) -> bool:
    return switch_count(switch_points) > 0


def shared_targets(
    switch_points: Switches, episodes: pd.DataFrame | None, evals: pd.DataFrame | None, budget: int
) -> list[str | None] | None:
    """The targets of the run's common phases; None for per-pair switches (each pair has its own)."""
    if isinstance(switch_points, Mapping):
        return None
    return phase_targets(episodes if episodes is not None else pd.DataFrame(), evals, switch_points, budget)


def _rows(df: pd.DataFrame | None, arm: Any, seed: int) -> pd.DataFrame:
    if df is None or df.empty or not {"arm", "seed"} <= set(df.columns):
        return pd.DataFrame()
    return df[(df["arm"] == arm) & (df["seed"] == seed)]


def pair_schedule(
    switch_points: Switches,
    budget: int,
    episodes: pd.DataFrame | None,
    evals: pd.DataFrame | None,
    arm: Any,
    seed: int,
    shared: list[str | None] | None = None,
) -> tuple[list[int], list[int], list[str | None]]:
    """(switch points, phase bounds, phase targets) of one arm x seed. With one list for the run,
    `shared` (from `shared_targets`) are the targets; else the pair's own rows give them."""
    points = switches_for(switch_points, arm, seed)
    if shared is None:
        shared = phase_targets(_rows(episodes, arm, seed), _rows(evals, arm, seed), points, budget)
    return points, phase_bounds(points, budget), list(shared)


def group_switches(runs: list[Any], labelled: bool, episodes: pd.DataFrame) -> Switches:
    """The switches of a group of runs that share a schedule, keyed as `episodes` (arms labelled
    'run:arm' for several runs): the head's list when no run has per-pair switches, else a mapping
    per (arm, seed), a run with one list giving it to each of its pairs in `episodes`."""
    own = [getattr(r, "switches", r.switch_points) for r in runs]
    if not any(isinstance(s, Mapping) for s in own):
        return runs[0].switch_points
    out: dict[tuple[Any, int], list[int]] = {}
    for run, sw in zip(runs, own):
        prefix = f"{run.name}:"

        def key(arm: Any, seed: Any, prefix: str = prefix) -> tuple[Any, int]:
            label = arm if not labelled or str(arm).startswith(prefix) else f"{prefix}{arm}"
            return label, int(seed)

        if isinstance(sw, Mapping):
            out.update({key(arm, seed): list(p) for (arm, seed), p in sw.items()})
        elif not run.episodes.empty:  # (make_figures may have labelled its arms already)
            for arm, seed in run.episodes[["arm", "seed"]].drop_duplicates().itertuples(index=False):
                out[key(arm, seed)] = list(sw)
    return out


def mark_pair_switches(ax, switch_points: Switches, arms: Any = None) -> None:
    """Per-pair switches (no common phases to tint): a thin dotted line at each arm x seed's switch
    episode (the arms in `arms` only, where given), darker where several pairs switch together."""
    if not isinstance(switch_points, Mapping):
        return
    keep = None if arms is None else {str(a) for a in arms}
    for (arm, _seed), points in sorted(switch_points.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if keep is None or str(arm) in keep:
            for s in points:
                ax.axvline(int(s), color="#333333", ls=":", lw=0.8, alpha=0.5, zorder=1)
