"""Realignment metrics: how fast each arm's reward and held-out style shares move after each
switch of the target style.

Everything here is a pure function of plain DataFrames (the run directory's tables, read with
`testbed.store.read_table`) and plain numbers; nothing imports the training code.

Parameters shared by the metrics (defaults in brackets):

  window    [128, shrunk to a quarter of the shortest phase for short runs: `auto_window`]
            episodes in a rolling mean of the training reward.
  fraction  [0.9] the bar is `fraction` x a reference reward (see below); the own-plateau
            threshold is `fraction` x the arm's own pre-switch plateau.
  horizon   [512, capped at the phase length] episodes after the switch over which the mean reward
            is taken (the area under the reward curve, divided by its length).

Per arm, seed and switch at clock T from style O to style N (`switch_metrics`):

  plateau             mean reward of the `window` judged episodes before T (this arm's own).
  dip                 the lowest rolling mean reward (full windows of post-switch episodes only)
                      before the next switch; `dip_at` = episodes after T where it ends.

The primary recovery metric, on a bar common to all arms of a seed (`analysis.metrics.recovery`):

  bar, bar_source     fraction x the reference reward of phase N for that seed ("reference": the
                      seed's SFT policy prompted with N only, from the run's `reference` table),
                      or, without one, fraction x the best pre-switch plateau over all arms of
                      the seed ("best plateau"). NaN when the source is under MIN_PLATEAU.
  episodes_to_bar     T..end of the first full post-switch window whose rolling reward reaches the
                      bar (at least `window`); a seed that never does before the phase ends is
                      **censored** at its follow-up (the episodes it was observed after T: the
                      phase length, next switch - T or budget - T, in a complete run), never NaN.
                      NaN only with no bar or no full post-switch window.
  censored, reached_bar   whether that time is a censoring time or the seed reached the bar
                      (both False where there is no time).
  judge_calls_to_bar  judge calls spent from T to the bar, or to the follow-up's end if censored
                      (failed calls included; from the updates table's cumulative `judge_calls`
                      where present, else one call per episode row). A difference of counts, so
                      a trainer's warm-up calls do not enter it.
  auc_after           mean reward of the judged episodes in [T, T + horizon) (capped at the phase):
                      the area under the reward curve after the switch, no threshold needed;
                      `horizon_reward` is the same number under its older name.

The secondary metric, against the arm's own plateau (an arm with a lower plateau has an easier bar;
kept to compare with older reports):

  status              "recovered", "not recovered", "no data" (nothing after T or before it), "no
                      plateau" (the reward before T was under MIN_PLATEAU = 0.1: the arm had not
                      learned the old target, so "recovering" a fraction of ~0 means nothing).
  threshold           fraction x plateau.
  recovered_own_plateau  status == "recovered".
  episodes_to_own_plateau, judge_calls_to_own_plateau  as episodes_to_bar / judge_calls_to_bar,
                      against the threshold: censored at the follow-up when "not recovered", NaN
                      for "no data" and "no plateau".

Held-out shares:

  old_share_at_switch held-out share of O at the last evaluation at or before T.
  old_half_life       episodes after T until O's held-out share first falls to half of
                      `old_share_at_switch` (linear between evaluations); censored at the phase's
                      end (its length, `old_half_life_censored`) if it never does, never dropped;
                      NaN only with no evaluation at or before T, or O's share 0 there.
  crossover           episodes after T until N's held-out share first exceeds O's (linear between
                      evaluations; 0 if it already does at T); censored at the phase's end if it
                      never does (`crossover_censored`).
  new_share_end       N's held-out share at the last evaluation before the next switch.

`realign_summary.aggregate` turns the per-seed table into one row per arm and switch: for each metric the mean
over seeds with rliable's bootstrap 95% confidence interval (`bootstrap_ci`) and the number of
seeds with a value. The mean of episodes_to_bar is the restricted mean (censored seeds at their
censoring time); beside it `reached_bar` of `bar_seeds` and the Kaplan-Meier median with its
interval (`recovery.bar_summary`). `seeds_with_data` (seeds whose status is "recovered" or "not
recovered") and `recovered_own_plateau` count the own-plateau metric. A single seed gives no
interval (NaN bounds). Paired comparisons between arms are `analysis.stats.paired`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

# The curves live in their own module; they are re-exported here, where callers have found them.
from analysis.metrics.curves import (  # noqa: F401
    judge_call_counter,
    judge_call_curve,
    judged,
    reward_curve,
    rolling_reward,
    share_curves,
    target_share_curve,
    warmup_judge_calls,
)
from analysis.metrics.recovery import (
    MIN_PLATEAU,
    Switches,
    common_bars,
    plateau,
    switches_for,
    time_to_level,
)
from analysis.metrics.shares import first_crossing as _first_crossing  # noqa: F401  (kept importable here)
from analysis.metrics.shares import share_metrics
from analysis.phases import phase_bounds, phase_judges, phase_targets, phase_values, switch_label  # noqa: F401
from analysis.stats import bootstrap

DEFAULT_WINDOW = 128
DEFAULT_FRACTION = 0.9
DEFAULT_HORIZON = 512
DEFAULT_CONFIDENCE = 0.95
DEFAULT_N_BOOT = 2000

# The per-seed metrics that `realign_summary.aggregate` summarises (name -> what a reader sees).
METRICS: dict[str, str] = {
    "plateau": "pre-switch plateau (reward)",
    "dip": "dip (lowest rolling reward)",
    "episodes_to_bar": "episodes to the bar (restricted mean)",
    "judge_calls_to_bar": "judge calls to the bar",
    "auc_after": "mean reward over the horizon",
    "episodes_to_own_plateau": "episodes to the own plateau",
    "judge_calls_to_own_plateau": "judge calls to the own plateau",
    "old_half_life": "old style half-life (episodes)",
    "crossover": "crossover (episodes)",
    "new_share_end": "new style share at phase end",
}
ALIASES = {"horizon_reward": "auc_after"}  # older name -> the column it repeats

SWITCH_COLUMNS = [
    "arm",
    "seed",
    "switch",
    "t",
    "from_style",
    "to_style",
    "from_judge",
    "to_judge",
    "window",
    "fraction",
    "horizon",
    "bar",
    "bar_source",
    "episodes_to_bar",
    "censored",
    "reached_bar",
    "judge_calls_to_bar",
    "follow_up",
    "auc_after",
    "horizon_reward",
    "horizon_episodes",
    "episodes_after",
    "plateau",
    "dip",
    "dip_at",
    "status",
    "threshold",
    "recovered_own_plateau",
    "episodes_to_own_plateau",
    "judge_calls_to_own_plateau",
    "old_share_at_switch",
    "old_half_life",
    "old_half_life_censored",
    "crossover",
    "crossover_censored",
    "new_share_end",
]


# ----------------------------------------------------------------------------------------------
# small helpers


def auto_window(switch_points: Switches, budget: int, window: int | None = None) -> int:
    """`window` (default 128), shrunk to a quarter of the shortest phase so that short runs keep
    several windows per phase; at least 1. Per-pair switch points: the shortest phase of any pair
    (one window for every arm, so that they are compared alike)."""
    window = DEFAULT_WINDOW if window is None else int(window)
    pairs = list(switch_points.values()) if isinstance(switch_points, Mapping) else [switch_points]
    lengths = [
        b - a
        for points in pairs
        for bounds in [phase_bounds(points, budget)]
        for a, b in zip(bounds, bounds[1:])
        if b > a
    ]
    if lengths:
        window = min(window, min(lengths) // 4)
    return max(1, window)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite values and rliable's percentile bootstrap
    interval of it (one task: the seeds resampled with replacement; `analysis.stats.bootstrap`).
    One value: (x, nan, nan); none: all nan; identical values: a zero-width interval.

    The interval is the bootstrap's percentiles as they come: it is not widened to contain the
    mean, so on a skewed sample (or at a low `confidence`) it can miss it."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if x.size == 1:
        return mean, float("nan"), float("nan")
    if np.all(x == x[0]):
        return mean, mean, mean
    low, high = bootstrap.bootstrap_mean(x, n_boot, confidence, seed)
    return mean, float(low), float(high)


# ----------------------------------------------------------------------------------------------
# per-switch metrics


def _own_plateau(after_t, roll, full: bool, own: float, fraction: float, switch: int, follow_up: int, calls) -> dict:
    """The secondary metric: against fraction x this arm's own pre-switch plateau."""
    threshold = fraction * own if np.isfinite(own) else float("nan")
    row = dict(
        threshold=threshold,
        recovered_own_plateau=False,
        episodes_to_own_plateau=float("nan"),
        judge_calls_to_own_plateau=float("nan"),
    )
    if not full or not np.isfinite(threshold):
        return {**row, "status": "no data"}
    if own < MIN_PLATEAU:
        return {**row, "status": "no plateau"}  # the old target was never learned: nothing to recover to
    episodes, calls_to, reached = time_to_level(after_t, roll, threshold, switch, follow_up, calls)
    return {
        **row,
        "status": "recovered" if reached else "not recovered",
        "recovered_own_plateau": reached,
        "episodes_to_own_plateau": episodes,
        "judge_calls_to_own_plateau": calls_to,
    }


def _common_bar(after_t, roll, full: bool, bar: float, switch: int, follow_up: int, calls) -> dict:
    """The primary metric: against the bar shared by every arm of the seed, censored at the follow-up."""
    if not full or not np.isfinite(bar):
        return dict(episodes_to_bar=float("nan"), judge_calls_to_bar=float("nan"), censored=False, reached_bar=False)
    episodes, calls_to, reached = time_to_level(after_t, roll, bar, switch, follow_up, calls)
    return dict(episodes_to_bar=episodes, judge_calls_to_bar=calls_to, censored=not reached, reached_bar=reached)


def _one_switch(
    ok: pd.DataFrame,
    all_rows: pd.DataFrame,
    updates: pd.DataFrame | None,
    evals: pd.DataFrame,
    switch: int,
    end: int,
    old: str | None,
    new: str | None,
    window: int,
    fraction: float,
    horizon: int,
    bar: tuple[float, str],
) -> dict:
    t = ok["t"].to_numpy()
    r = ok["reward"].to_numpy(dtype=float)
    in_phase = (t >= switch) & (t < end)
    after_t = t[in_phase]
    roll = pd.Series(r[in_phase]).rolling(window, min_periods=window).mean().to_numpy()
    full = bool(np.isfinite(roll).any())
    seen = all_rows["t"].to_numpy()
    seen = seen[(seen >= switch) & (seen < end)]
    follow_up = int(seen.max()) + 1 - switch if seen.size else 0  # the phase length in a complete run
    calls = judge_call_counter(all_rows, updates)
    own = plateau(t, r, switch, window)
    row: dict = {
        "episodes_after": int(in_phase.sum()),
        "plateau": own,
        "follow_up": follow_up,
        "bar": bar[0],
        "bar_source": bar[1],
    }
    if full:
        i_dip = int(np.nanargmin(roll))
        row.update(dip=float(roll[i_dip]), dip_at=float(after_t[i_dip] - switch + 1))
    else:
        row.update(dip=float("nan"), dip_at=float("nan"))
    row.update(_common_bar(after_t, roll, full, bar[0], switch, follow_up, calls))
    row.update(_own_plateau(after_t, roll, full, own, fraction, switch, follow_up, calls))
    in_h = (t >= switch) & (t < min(end, switch + horizon))
    auc = float(r[in_h].mean()) if in_h.any() else float("nan")
    row.update(auc_after=auc, horizon_reward=auc, horizon_episodes=int(in_h.sum()))
    shares = share_metrics(evals, switch, end, old, new)
    if old is not None and old == new:  # a judge change that kept the target: no old style to fade
        shares.update(old_share_at_switch=float("nan"), old_half_life=float("nan"), crossover=float("nan"))
    row.update(shares)
    return row


def _arm_seed_pairs(episodes: pd.DataFrame, ok: pd.DataFrame, seeds: Sequence[int] | None) -> list[tuple]:
    """The (arm, seed) pairs with judged episodes, and every arm x `seeds` when given."""
    pairs: set[tuple] = set()
    if not ok.empty:
        pairs |= set(map(tuple, ok[["arm", "seed"]].drop_duplicates().itertuples(index=False)))
    if seeds is not None and not episodes.empty:
        pairs |= {(arm, s) for arm in episodes["arm"].unique() for s in seeds}
    return sorted(pairs, key=lambda p: (str(p[0]), p[1]))


def _rows_of(df: pd.DataFrame | None, arm, seed) -> pd.DataFrame | None:
    if df is None or df.empty or not {"arm", "seed"} <= set(df.columns):
        return None
    return df[(df["arm"] == arm) & (df["seed"] == seed)]


def switch_metrics(
    episodes: pd.DataFrame,
    switch_points: Switches,
    budget: int,
    evals: pd.DataFrame | None = None,
    updates: pd.DataFrame | None = None,
    window: int | None = None,
    fraction: float = DEFAULT_FRACTION,
    horizon: int | None = DEFAULT_HORIZON,
    seeds: Sequence[int] | None = None,
    reference: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per arm, seed and switch (columns `SWITCH_COLUMNS`; see the module docstring).

    `episodes` holds every arm of the run: the fallback bar (best plateau) is taken over them.
    `reference` is the run's `reference` table (None or empty: the best-plateau fallback).
    `window=None` uses `auto_window`; `horizon=None` the whole phase. An arm x seed with no
    judged episodes is left out unless `seeds` names it (then its rows say status "no data").
    `switch_points` per (arm, seed) (a schedule in simulated seconds): each pair's switches, its
    phases and its targets are its own; the window and the bar of a seed are common."""
    window = auto_window(switch_points, budget, window)
    horizon = int(budget) if horizon is None else int(horizon)
    evals = evals if evals is not None else pd.DataFrame()
    targets = [] if isinstance(switch_points, Mapping) else phase_targets(episodes, evals, switch_points, budget)
    judges = [] if isinstance(switch_points, Mapping) else phase_judges(episodes, evals, switch_points, budget)
    ok = judged(episodes)
    bars = common_bars(ok, switch_points, window, fraction, reference)
    rows = []
    for arm, seed in _arm_seed_pairs(episodes, ok, seeds):
        mine = ok[(ok["arm"] == arm) & (ok["seed"] == seed)].sort_values("t")
        all_rows = episodes[(episodes["arm"] == arm) & (episodes["seed"] == seed)]
        up, ev = _rows_of(updates, arm, seed), _rows_of(evals, arm, seed)
        ev = ev if ev is not None else pd.DataFrame()
        points = switches_for(switch_points, arm, seed)
        bounds = phase_bounds(points, budget)
        if isinstance(switch_points, Mapping):
            targets = phase_targets(all_rows, ev, points, budget)
            judges = phase_judges(all_rows, ev, points, budget)
        for i, switch in enumerate(points):
            metrics = _one_switch(
                mine,
                all_rows,
                up,
                ev,
                int(switch),
                bounds[i + 2],
                targets[i],
                targets[i + 1],
                window,
                fraction,
                horizon,
                bars.get((seed, i + 1), (float("nan"), "none")),
            )
            rows.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "switch": i + 1,
                    "t": int(switch),
                    "from_style": targets[i],
                    "to_style": targets[i + 1],
                    "from_judge": judges[i] if judges else None,
                    "to_judge": judges[i + 1] if judges else None,
                    "window": window,
                    "fraction": fraction,
                    "horizon": horizon,
                    **metrics,
                }
            )
    return pd.DataFrame(rows, columns=SWITCH_COLUMNS)
