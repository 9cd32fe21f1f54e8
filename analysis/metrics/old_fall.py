"""How fast the old target fades after each switch: `old_fall`, the episodes until the old style's
held-out share falls to `old_level` (the definition is in analysis.metrics.nonstationary's docstring, which
re-exports these)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics import phases as pair_phases
from analysis.metrics import realign
from analysis.metrics.shares import first_crossing, share_series

DEFAULT_OLD_LEVEL = 0.1
FALL_COLUMNS = ["arm", "seed", "switch", "t", "from_style", "to_style", "old_level", "old_share_at_switch"]
FALL_COLUMNS += ["old_fall", "old_fall_censored"]


def fall_time(
    t: Sequence[float] | np.ndarray,
    share: Sequence[float] | np.ndarray,
    switch: float,
    end: float,
    level: float = DEFAULT_OLD_LEVEL,
) -> float:
    """Episodes after `switch` until `share` (sampled at clocks `t`) first falls to `level` or
    below before `end`, linear between samples; the last sample at or before `switch` stands for
    the value at `switch` (0 if it is already there). Censored at `end - switch` if it never does
    (`fall_censored` says which); NaN when no sample precedes the switch or none follows it."""
    t, share = np.asarray(t, dtype=float), np.asarray(share, dtype=float)
    order = np.argsort(t, kind="stable")
    t, share = t[order], share[order]
    before = np.flatnonzero(t <= switch)
    if before.size == 0:
        return float("nan")
    sel = (t >= t[before[-1]]) & (t < end)  # as realign's old_half_life: samples up to the next switch
    ts, ys = t[sel].copy(), share[sel]
    ts[0] = switch
    hit = first_crossing(ts, ys, level, above=False)
    if np.isfinite(hit):
        return hit - float(switch)
    return float(end) - float(switch) if ts.size > 1 else float("nan")  # no evaluation after T: no follow-up


def fall_censored(
    t: Sequence[float] | np.ndarray,
    share: Sequence[float] | np.ndarray,
    switch: float,
    end: float,
    level: float = DEFAULT_OLD_LEVEL,
) -> bool:
    """Whether `fall_time` is a censoring time: the share never fell to `level` before `end`."""
    t, share = np.asarray(t, dtype=float), np.asarray(share, dtype=float)
    if not (t <= switch).any():
        return False
    sel = (t >= t[t <= switch].max()) & (t < end)
    return int(sel.sum()) > 1 and not bool((share[sel] <= level).any())


def old_fall(
    evals: pd.DataFrame | None,
    switch_points: realign.Switches,
    budget: int,
    episodes: pd.DataFrame | None = None,
    old_level: float = DEFAULT_OLD_LEVEL,
) -> pd.DataFrame:
    """One row per arm, seed (with evaluations) and switch (columns `FALL_COLUMNS`): `old_fall`,
    the episodes until the old target's held-out share falls to `old_level` (see the module
    docstring). The phases' targets come from the episodes where given, else the evaluations
    (per-pair `switch_points`: each pair's own switches, phases and targets)."""
    if evals is None or evals.empty or not pair_phases.has_switches(switch_points):
        return pd.DataFrame(columns=FALL_COLUMNS)
    shared = pair_phases.shared_targets(switch_points, episodes, evals, budget)
    rows = []
    for (arm, seed), ev in evals.groupby(["arm", "seed"], sort=True):
        points, bounds, targets = pair_phases.pair_schedule(switch_points, budget, episodes, ev, arm, seed, shared)
        for i, switch in enumerate(points):
            old, new = targets[i], targets[i + 1]
            et, share = share_series(ev, old)
            at_switch = share[et <= switch]
            rows.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "switch": i + 1,
                    "t": int(switch),
                    "from_style": old,
                    "to_style": new,
                    "old_level": old_level,
                    "old_share_at_switch": float(at_switch[-1]) if at_switch.size and old != new else np.nan,
                    # a judge change that kept the target has no old style to fall
                    "old_fall": fall_time(et, share, switch, bounds[i + 2], old_level)
                    if et.size and old != new
                    else np.nan,
                    "old_fall_censored": bool(et.size)
                    and old != new
                    and fall_censored(et, share, switch, bounds[i + 2], old_level),
                }
            )
    return pd.DataFrame(rows, columns=FALL_COLUMNS)
