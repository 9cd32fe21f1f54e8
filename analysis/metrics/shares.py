"""Held-out style shares after a switch: how fast the old target's share fades and the new one's
takes over, from the evaluations table (one arm x seed). Used by `analysis.metrics.realign.switch_metrics`
(old_half_life, crossover, new_share_end) and `analysis.metrics.nonstationary.old_fall`. Pure functions."""

from __future__ import annotations

import numpy as np
import pandas as pd


def first_crossing(t: np.ndarray, y: np.ndarray, level: float | np.ndarray, above: bool) -> float:
    """The first t where y reaches `level` (from below if above=True, else from above), linear
    between samples; the first sample counts if it is already there. NaN if never."""
    d = (y - level) if above else (level - y)
    hit = np.flatnonzero(d >= 0)
    if hit.size == 0:
        return float("nan")
    i = int(hit[0])
    if i == 0 or not np.isfinite(d[i - 1]) or d[i] == d[i - 1]:
        return float(t[i])
    frac = -d[i - 1] / (d[i] - d[i - 1])
    return float(t[i - 1] + frac * (t[i] - t[i - 1]))


def share_series(evals: pd.DataFrame, style: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(t, share of `style`) over the evaluations of one arm x seed, sorted by t (0 where an
    evaluation did not produce that style)."""
    if evals.empty or style is None:
        return np.zeros(0), np.zeros(0)
    per_t = evals.groupby("t")["style"].size().index.to_numpy(float)
    of_style = evals[evals["style"] == style].groupby("t")["share"].mean()
    return per_t, of_style.reindex(per_t, fill_value=0.0).to_numpy(float)


def share_metrics(evals: pd.DataFrame, switch: int, end: int, old: str | None, new: str | None) -> dict:
    """Held-out shares: from the last evaluation at or before T to the last one before the next switch.
    A time to an event that does not happen before the segment ends (the old share never halves, the
    new one never overtakes it) is censored there: the value is end - T and its `_censored` flag is
    set, so the seed is counted, never dropped (a dropped seed is a survivor bias)."""
    row = dict(
        old_share_at_switch=float("nan"),
        old_half_life=float("nan"),
        old_half_life_censored=False,
        crossover=float("nan"),
        crossover_censored=False,
        new_share_end=float("nan"),
    )
    et, old_share = share_series(evals, old)
    _, new_share = share_series(evals, new)
    if not et.size or old is None or new is None:
        return row
    at_or_before = np.flatnonzero(et <= switch)
    first = et[at_or_before[-1]] if at_or_before.size else switch
    sel = (et >= first) & (et < end)
    ts, so, sn = et[sel].copy(), old_share[sel], new_share[sel]
    if not ts.size:
        return row
    if at_or_before.size:
        ts[0] = switch  # the last evaluation at or before T stands for the policy at T
        s0 = float(so[0])
        row["old_share_at_switch"] = s0
        if s0 > 0:
            half = first_crossing(ts, so, s0 / 2.0, above=False)
            if np.isfinite(half) or ts.size > 1:  # censored only with an evaluation after T to say so
                row["old_half_life"] = half - switch if np.isfinite(half) else float(end - switch)
                row["old_half_life_censored"] = not np.isfinite(half)
    cross = first_crossing(ts, sn - so, 1e-12, above=True)
    if np.isfinite(cross) or ts.size > 1:
        row["crossover"] = max(0.0, cross - switch) if np.isfinite(cross) else float(end - switch)
        row["crossover_censored"] = not np.isfinite(cross)
    after_sel = ts > switch
    row["new_share_end"] = float(sn[after_sel][-1]) if after_sel.any() else float("nan")
    return row
