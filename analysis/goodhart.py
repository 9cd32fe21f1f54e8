"""The Goodhart gap: what the training judge rewards that the gold judge does not.

A scenario may name a `gold_judge` beside its training judge; it scores (a share of) the judged
training episodes and never trains (`gold_reward` in the episodes table). Per arm:

  gap          training reward - gold reward, on the episodes the gold judge scored. 0: the
               policy earns its reward the way the gold judge agrees with; > 0: reward the gold
               judge would not give (the training judge is exploited, or merely more lenient).
  withheld     1 - gold reward / training reward: the share of the training reward the gold judge
               withholds. The gap itself scales with the reward level (0 where both are 0, after
               a switch); this share does not.
  gap_curve    the gap's rolling mean over `window` scored episodes, per seed, against the clock.
  per phase    mean training reward, gold reward and gap over each phase of the schedule, mean
               over seeds with a 95% bootstrap interval (realign.bootstrap_ci); the gap's rise
               from the first `window` scored episodes to the last (`gap_rise`).

A gap that is there from the start (the SFT policy already writes what only the lenient judge
passes) is leniency; a gap that grows with training is the policy learning to exploit it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.metrics.curves import judged
from analysis.metrics.realign import bootstrap_ci, phase_bounds
from analysis.metrics.recovery import Switches, switch_count, switches_for

COLUMNS = [
    "arm",
    "phase",
    "start",
    "end",
    "seeds",
    "scored",
    "reward",
    "reward_lo",
    "reward_hi",
    "gold_reward",
    "gold_reward_lo",
    "gold_reward_hi",
    "gap",
    "gap_lo",
    "gap_hi",
    "withheld",
    "withheld_lo",
    "withheld_hi",
]


def scored(episodes: pd.DataFrame) -> pd.DataFrame:
    """The judged episodes the gold judge scored, with their gap (reward - gold_reward)."""
    if episodes.empty or "gold_reward" not in episodes:
        return pd.DataFrame(columns=[*episodes.columns, "gap"])
    ok = judged(episodes)
    ok = ok[ok["gold_reward"].notna()].copy()
    ok["gold_reward"] = ok["gold_reward"].astype(float)
    ok["gap"] = ok["reward"].astype(float) - ok["gold_reward"]
    return ok


def _spans(g: pd.DataFrame, arm, switch_points: Switches, budget: int) -> list[tuple[str, Any, Any]]:
    """(phase, start, end) of the arm's rows `g`: numbers for one list of switches; per-pair ones
    give Series aligned with `g` (each seed's own phase; a seed without that phase: an empty span)."""
    if not isinstance(switch_points, Mapping):
        bounds = phase_bounds(switch_points, budget)
        return [("all", 0, int(budget))] + [(str(i + 1), a, b) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    per_seed = {s: phase_bounds(switches_for(switch_points, arm, s), budget) for s in g["seed"].unique()}
    spans: list[tuple[str, Any, Any]] = [("all", 0, int(budget))]
    for i in range(switch_count(switch_points) + 1):
        lo = g["seed"].map(lambda s, i=i: per_seed[s][i] if i + 1 < len(per_seed[s]) else 0)
        hi = g["seed"].map(lambda s, i=i: per_seed[s][i + 1] if i + 1 < len(per_seed[s]) else 0)
        spans.append((str(i + 1), lo, hi))
    return spans


def _edges(lo: Any, hi: Any) -> tuple[int, int]:
    """A span's start and end: per-seed ones give the earliest start and the latest end."""
    if not isinstance(lo, pd.Series):
        return int(lo), int(hi)
    has = hi > lo
    return (int(lo[has].min()), int(hi[has].max())) if has.any() else (0, 0)


def gap_overview(episodes: pd.DataFrame, switch_points: Switches, budget: int) -> pd.DataFrame:
    """One row per arm and phase (phase "all" for the whole run): see the module docstring. With
    per-pair switch points ({(arm, seed): [...]}) phase k is each seed's own k-th phase; `start`
    and `end` are then the earliest start and the latest end over the arm's seeds."""
    ok = scored(episodes)
    if ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for arm, g in ok.groupby("arm", sort=True):
        for phase, lo, hi in _spans(g, arm, switch_points, budget):
            part = g[(g["t"] >= lo) & (g["t"] < hi)]
            start, end = _edges(lo, hi)
            per_seed = part.groupby("seed")[["reward", "gold_reward", "gap"]].mean()
            with np.errstate(divide="ignore", invalid="ignore"):  # no training reward: no share to withhold
                per_seed["withheld"] = np.where(
                    per_seed["reward"] > 0, 1.0 - per_seed["gold_reward"] / per_seed["reward"], np.nan
                )
            row = {"arm": arm, "phase": phase, "start": start, "end": end, "seeds": len(per_seed), "scored": len(part)}
            for col in ("reward", "gold_reward", "gap", "withheld"):
                mean, lo, hi = bootstrap_ci(per_seed[col].to_numpy(float) if len(per_seed) else np.zeros(0))
                row.update({col: mean, f"{col}_lo": lo, f"{col}_hi": hi})
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def gap_rise(episodes: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per arm: the gap over the first and the last `window` scored episodes of each seed, and
    the rise between them (mean over seeds, 95% interval)."""
    ok = scored(episodes)
    cols = ["arm", "seeds", "gap_start", "gap_end", "gap_rise", "gap_rise_lo", "gap_rise_hi"]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for arm, g in ok.groupby("arm", sort=True):
        starts, ends = [], []
        for _, s in g.sort_values("t").groupby("seed"):
            starts.append(s["gap"].head(window).mean())
            ends.append(s["gap"].tail(window).mean())
        rise = np.asarray(ends) - np.asarray(starts)
        mean, lo, hi = bootstrap_ci(rise)
        rows.append(
            {
                "arm": arm,
                "seeds": len(starts),
                "gap_start": float(np.mean(starts)),
                "gap_end": float(np.mean(ends)),
                "gap_rise": mean,
                "gap_rise_lo": lo,
                "gap_rise_hi": hi,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def gap_curve(episodes: pd.DataFrame, window: int, points: int = 200) -> pd.DataFrame:
    """Rolling means over `window` scored episodes of the training reward, the gold reward and the
    gap, per arm and seed, thinned to at most `points` clock values on a grid shared by the seeds:
    columns arm, seed, t, reward, gold_reward, gap."""
    ok = scored(episodes)
    if ok.empty:
        return pd.DataFrame(columns=["arm", "seed", "t", "reward", "gold_reward", "gap"])
    t_max = int(ok["t"].max())
    grid = np.arange(0, t_max + 1, max(1, int(np.ceil((t_max + 1) / points))))
    out = []
    for (arm, seed), g in ok.sort_values("t").groupby(["arm", "seed"], sort=True):
        roll = g[["reward", "gold_reward", "gap"]].rolling(window, min_periods=window).mean()
        t = g["t"].to_numpy(float)
        keep_rows = roll["gap"].notna().to_numpy()
        if not keep_rows.any():
            continue
        t, roll = t[keep_rows], roll[keep_rows]
        keep = grid[(grid >= t.min()) & (grid <= t.max())]
        out.append(
            pd.DataFrame(
                {
                    "arm": arm,
                    "seed": seed,
                    "t": keep,
                    **{c: np.interp(keep, t, roll[c].to_numpy(float)) for c in ("reward", "gold_reward", "gap")},
                }
            )
        )
    return (
        pd.concat(out, ignore_index=True)
        if out
        else pd.DataFrame(columns=["arm", "seed", "t", "reward", "gold_reward", "gap"])
    )


def gap_figure(
    episodes: pd.DataFrame,
    switch_points: Sequence[int],
    budget: int,
    window: int,
    palette: dict[str, str] | None = None,
    targets: Sequence[str | None] = (),
    pair_switches: Switches = (),
):
    """Two panels against the clock: training (solid) and gold (dashed) reward per arm, and the
    gap; mean over seeds with a 95% bootstrap band. None without gold verdicts. `pair_switches`
    per (arm, seed) (a schedule in simulated seconds): each pair's switch dotted, no phase tint."""
    from analysis.figures.style import mean_lineplot, new_figure, shade_phases
    from analysis.metrics.phases import mark_pair_switches

    curve = gap_curve(episodes, window)
    if curve.empty:
        return None
    fig, axes = new_figure(1, 2, 11.0, 3.6)
    long = curve.melt(
        id_vars=["arm", "seed", "t"], value_vars=["reward", "gold_reward"], var_name="judge", value_name="value"
    )
    long["judge"] = long["judge"].map({"reward": "training judge", "gold_reward": "gold judge"})
    ax = axes[0, 0]
    shade_phases(ax, switch_points, budget, list(targets))
    mark_pair_switches(ax, pair_switches)
    mean_lineplot(ax, long, "t", "value", "arm", palette=palette, style="judge")
    ax.set(xlabel="episodes (drift clock)", ylabel=f"reward (rolling {window})", title="training vs gold reward")
    ax = axes[0, 1]
    shade_phases(ax, switch_points, budget, list(targets), label=False)
    mark_pair_switches(ax, pair_switches)
    mean_lineplot(ax, curve, "t", "gap", "arm", palette=palette)
    ax.axhline(0.0, color="#444444", lw=0.8)
    ax.set(xlabel="episodes (drift clock)", ylabel="training - gold reward", title="Goodhart gap")
    return fig
