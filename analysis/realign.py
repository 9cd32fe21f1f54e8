"""Realignment metrics: how fast each arm's reward and held-out style shares move after each
switch of the target style.

Everything here is a pure function of plain DataFrames (the run directory's tables, read with
`testbed.store.read_table`) and plain numbers; nothing imports the training code.

Parameters shared by the metrics (defaults in brackets):

  window    [128, shrunk to a quarter of the shortest phase for short runs: `auto_window`]
            episodes in a rolling mean of the training reward.
  fraction  [0.9] the rolling reward has *recovered* when it reaches `fraction` x the pre-switch
            plateau (the mean reward of the `window` judged episodes before the switch).
  horizon   [512, capped at the phase length] episodes after the switch over which the mean reward
            is taken (the area under the reward curve, divided by its length).

Per arm, seed and switch at clock T from style O to style N (`switch_metrics`):

  plateau             mean reward of the `window` judged episodes before T.
  dip                 the lowest rolling mean reward (full windows of post-switch episodes only)
                      before the next switch; `dip_at` = episodes after T where it ends.
  recovered           whether a full post-switch window reaches fraction x plateau before the next
                      switch (or the end of the run); False also when there is nothing to judge by
                      (see `status`: "recovered", "not recovered", "no data" (nothing after T or
                      before it), "no plateau" (the reward before T was under MIN_PLATEAU = 0.1: the arm
                      had not learned the old target, so "recovering" a fraction of ~0 means nothing)).
  episodes_to_recover T..end of that first window, in episodes (at least `window`: the first window
                      that lies wholly after the switch); NaN if not recovered.
  judge_calls_to_recover  judge calls spent from T to the recovery (failed calls included; from
                      the updates table's cumulative `judge_calls` where present, else one call
                      per episode row).
  horizon_reward      mean reward of the judged episodes in [T, T + horizon) (capped at the phase).
  old_share_at_switch held-out share of O at the last evaluation at or before T.
  old_half_life       episodes after T until O's held-out share first falls to half of
                      `old_share_at_switch` (linear between evaluations); NaN if it never does.
  crossover           episodes after T until N's held-out share first exceeds O's (linear between
                      evaluations; 0 if it already does at T); NaN if it never does.
  new_share_end       N's held-out share at the last evaluation before the next switch.

`aggregate` turns the per-seed table into one row per arm and switch: for each metric the mean
over seeds with rliable's bootstrap 95% confidence interval (`bootstrap_ci`), the number of
seeds with a value, `seeds_with_data` (seeds whose status is "recovered" or "not recovered")
and `recovered` (how many of them recovered). A single seed gives no interval (NaN bounds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# The curves live in their own module; they are re-exported here, where callers have found them.
from analysis.curves import (  # noqa: F401
    judge_call_counter,
    judge_call_curve,
    judged,
    reward_curve,
    rolling_reward,
    share_curves,
    target_share_curve,
)

DEFAULT_WINDOW = 128
DEFAULT_FRACTION = 0.9
DEFAULT_HORIZON = 512
DEFAULT_CONFIDENCE = 0.95
DEFAULT_N_BOOT = 2000
MIN_PLATEAU = 0.1  # below this pre-switch reward a "recovery" to a fraction of it is trivial

# The per-seed metrics that `aggregate` summarises (name -> what a reader sees).
METRICS: dict[str, str] = {
    "plateau": "pre-switch plateau (reward)",
    "dip": "dip (lowest rolling reward)",
    "episodes_to_recover": "episodes to recover",
    "judge_calls_to_recover": "judge calls to recover",
    "horizon_reward": "mean reward over horizon",
    "old_half_life": "old style half-life (episodes)",
    "crossover": "crossover (episodes)",
    "new_share_end": "new style share at phase end",
}

SWITCH_COLUMNS = [
    "arm", "seed", "switch", "t", "from_style", "to_style", "window", "fraction", "horizon",
    "status", "recovered", "episodes_after", "plateau", "threshold", "dip", "dip_at",
    "episodes_to_recover", "judge_calls_to_recover", "horizon_reward", "horizon_episodes",
    "old_share_at_switch", "old_half_life", "crossover", "new_share_end",
]


# ----------------------------------------------------------------------------------------------
# small helpers


def phase_bounds(switch_points: Sequence[int], budget: int) -> list[int]:
    """[0, T1, T2, ..., budget]: the clock values where the phases start and the run ends."""
    return [0, *[int(s) for s in switch_points], int(budget)]


def auto_window(switch_points: Sequence[int], budget: int, window: int | None = None) -> int:
    """`window` (default 128), shrunk to a quarter of the shortest phase so that short runs keep
    several windows per phase; at least 1."""
    window = DEFAULT_WINDOW if window is None else int(window)
    bounds = phase_bounds(switch_points, budget)
    lengths = [b - a for a, b in zip(bounds, bounds[1:]) if b > a]
    if lengths:
        window = min(window, min(lengths) // 4)
    return max(1, window)


def phase_targets(episodes: pd.DataFrame, evals: pd.DataFrame | None, switch_points: Sequence[int],
                  budget: int) -> list[str | None]:
    """The target style of each phase (the most frequent `target_style` in it), None if unknown."""
    bounds = phase_bounds(switch_points, budget)
    sources = [df for df in (episodes, evals) if df is not None and not df.empty and "target_style" in df]
    out: list[str | None] = []
    for a, b in zip(bounds, bounds[1:]):
        style = None
        for df in sources:
            phase = df[(df["t"] >= a) & (df["t"] < b)]["target_style"].dropna()
            if not phase.empty:
                style = str(phase.mode().iloc[0])
                break
        out.append(style)
    return out


def bootstrap_ci(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE, n_boot: int = DEFAULT_N_BOOT,
                 seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite values and rliable's bootstrap interval of it
    (one task: the seeds resampled with replacement; `analysis.nonstationary`). One value:
    (x, nan, nan); none: all nan. Identical values give a zero-width interval; the interval always
    contains the mean."""
    from analysis.nonstationary import bootstrap_mean  # rliable's machinery lives there

    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if x.size == 1:
        return mean, float("nan"), float("nan")
    if np.all(x == x[0]):
        return mean, mean, mean
    low, high = bootstrap_mean(x, n_boot, confidence, seed)
    return mean, float(min(low, mean)), float(max(high, mean))


def _first_crossing(t: np.ndarray, y: np.ndarray, level: float | np.ndarray, above: bool) -> float:
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


# ----------------------------------------------------------------------------------------------
# per-switch metrics


def _share_series(evals: pd.DataFrame, style: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(t, share of `style`) over the evaluations of one arm x seed, sorted by t (0 where an
    evaluation did not produce that style)."""
    if evals.empty or style is None:
        return np.zeros(0), np.zeros(0)
    per_t = evals.groupby("t")["style"].size().index.to_numpy(float)
    of_style = evals[evals["style"] == style].groupby("t")["share"].mean()
    return per_t, of_style.reindex(per_t, fill_value=0.0).to_numpy(float)


def _one_switch(ok: pd.DataFrame, all_rows: pd.DataFrame, updates: pd.DataFrame | None, evals: pd.DataFrame,
                switch: int, end: int, old: str | None, new: str | None, window: int, fraction: float,
                horizon: int) -> dict:
    t = ok["t"].to_numpy()
    r = ok["reward"].to_numpy(dtype=float)
    before = r[(t >= switch - window) & (t < switch)]
    in_phase = (t >= switch) & (t < end)
    after_t, after_r = t[in_phase], r[in_phase]
    row: dict = {"episodes_after": int(in_phase.sum())}
    plateau = float(before.mean()) if before.size else float("nan")
    threshold = fraction * plateau if np.isfinite(plateau) else float("nan")
    row.update(plateau=plateau, threshold=threshold)

    roll = pd.Series(after_r).rolling(window, min_periods=window).mean().to_numpy()
    full = np.isfinite(roll)
    if full.any():
        i_dip = int(np.nanargmin(roll))
        row.update(dip=float(roll[i_dip]), dip_at=float(after_t[i_dip] - switch + 1))
    else:
        row.update(dip=float("nan"), dip_at=float("nan"))

    row.update(recovered=False, episodes_to_recover=float("nan"), judge_calls_to_recover=float("nan"))
    if not full.any() or not np.isfinite(threshold):
        row["status"] = "no data"
    elif plateau < MIN_PLATEAU:
        row["status"] = "no plateau"  # the old target was never learned: nothing to recover to
    else:
        hit = np.flatnonzero(full & (roll >= threshold - 1e-12))
        if hit.size:
            t_rec = int(after_t[hit[0]])
            calls = judge_call_counter(all_rows, updates)
            row.update(status="recovered", recovered=True, episodes_to_recover=float(t_rec - switch + 1),
                       judge_calls_to_recover=calls(t_rec + 1) - calls(switch))
        else:
            row["status"] = "not recovered"

    h_end = min(end, switch + horizon)
    in_h = (t >= switch) & (t < h_end)
    row.update(horizon_reward=float(r[in_h].mean()) if in_h.any() else float("nan"), horizon_episodes=int(in_h.sum()))

    # held-out shares: from the last evaluation at or before T to the last one before the next switch
    row.update(old_share_at_switch=float("nan"), old_half_life=float("nan"), crossover=float("nan"),
               new_share_end=float("nan"))
    et, old_share = _share_series(evals, old)
    _, new_share = _share_series(evals, new)
    if et.size and old is not None and new is not None:
        at_or_before = np.flatnonzero(et <= switch)
        first = et[at_or_before[-1]] if at_or_before.size else switch
        sel = (et >= first) & (et < end)
        ts, so, sn = et[sel].copy(), old_share[sel], new_share[sel]
        if ts.size:
            if at_or_before.size:
                # the last evaluation at or before T stands for the policy at T
                ts[0] = switch
                s0 = float(so[0])
                row["old_share_at_switch"] = s0
                if s0 > 0:
                    row["old_half_life"] = _first_crossing(ts, so, s0 / 2.0, above=False) - switch
            cross = _first_crossing(ts, sn - so, 1e-12, above=True)
            row["crossover"] = max(0.0, cross - switch) if np.isfinite(cross) else float("nan")
            after_sel = ts > switch
            row["new_share_end"] = float(sn[after_sel][-1]) if after_sel.any() else float("nan")
    return row


def switch_metrics(episodes: pd.DataFrame, switch_points: Sequence[int], budget: int,
                   evals: pd.DataFrame | None = None, updates: pd.DataFrame | None = None,
                   window: int | None = None, fraction: float = DEFAULT_FRACTION,
                   horizon: int | None = DEFAULT_HORIZON, seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per arm, seed and switch (columns `SWITCH_COLUMNS`; see the module docstring).

    `window=None` uses `auto_window`; `horizon=None` the whole phase. An arm x seed with no
    judged episodes is left out unless `seeds` names it (then its rows say status "no data")."""
    window = auto_window(switch_points, budget, window)
    horizon = int(budget) if horizon is None else int(horizon)
    bounds = phase_bounds(switch_points, budget)
    evals = evals if evals is not None else pd.DataFrame()
    targets = phase_targets(episodes, evals, switch_points, budget)
    ok = judged(episodes)
    pairs: set[tuple] = set()
    if not ok.empty:
        pairs |= set(map(tuple, ok[["arm", "seed"]].drop_duplicates().itertuples(index=False)))
    if seeds is not None and not episodes.empty:
        pairs |= {(arm, s) for arm in episodes["arm"].unique() for s in seeds}
    rows = []
    for arm, seed in sorted(pairs, key=lambda p: (str(p[0]), p[1])):
        mine = ok[(ok["arm"] == arm) & (ok["seed"] == seed)].sort_values("t")
        all_rows = episodes[(episodes["arm"] == arm) & (episodes["seed"] == seed)]
        up = None
        if updates is not None and not updates.empty and {"arm", "seed"} <= set(updates.columns):
            up = updates[(updates["arm"] == arm) & (updates["seed"] == seed)]
        ev = evals[(evals["arm"] == arm) & (evals["seed"] == seed)] if not evals.empty else evals
        for i, switch in enumerate(switch_points):
            metrics = _one_switch(mine, all_rows, up, ev, int(switch), bounds[i + 2], targets[i], targets[i + 1],
                                  window, fraction, horizon)
            rows.append({"arm": arm, "seed": seed, "switch": i + 1, "t": int(switch), "from_style": targets[i],
                         "to_style": targets[i + 1], "window": window, "fraction": fraction, "horizon": horizon,
                         **metrics})
    return pd.DataFrame(rows, columns=SWITCH_COLUMNS)


def aggregate(per_seed: pd.DataFrame, confidence: float = DEFAULT_CONFIDENCE, n_boot: int = DEFAULT_N_BOOT,
              seed: int = 0, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per arm (and run, if there is a `run` column) and switch: for each metric in
    `metrics` (default `METRICS`), `<metric>` (mean over seeds), `<metric>_lo`, `<metric>_hi`
    (bootstrap interval) and `<metric>_n` (seeds with a value); plus `seeds` (seeds in the
    table), `seeds_with_data` and `recovered` (seeds that recovered)."""
    metrics = list(METRICS) if metrics is None else list(metrics)
    keys = [k for k in ("run", "arm", "switch", "t", "from_style", "to_style") if k in per_seed.columns]
    columns = [*keys, "seeds", "seeds_with_data", "recovered"]
    for m in metrics:
        columns += [m, f"{m}_lo", f"{m}_hi", f"{m}_n"]
    if per_seed.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, g in per_seed.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update(seeds=int(g["seed"].nunique()), seeds_with_data=int(g["status"].isin(["recovered", "not recovered"]).sum()),
                   recovered=int(g["recovered"].astype(bool).sum()))
        for m in metrics:
            vals = g[m].to_numpy(float) if m in g else np.zeros(0)
            mean, lo, hi = bootstrap_ci(vals, confidence, n_boot, seed)
            row.update({m: mean, f"{m}_lo": lo, f"{m}_hi": hi, f"{m}_n": int(np.isfinite(vals).sum())})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def arm_overview(episodes: pd.DataFrame, evals: pd.DataFrame | None = None, updates: pd.DataFrame | None = None,
                 window: int = DEFAULT_WINDOW) -> pd.DataFrame:
    """One row per arm: seeds, episodes, judge calls and failures, the mean reward over the run and
    over each seed's last `window` judged episodes (mean over seeds), and the held-out share of
    the final target style at the last evaluation (mean over seeds)."""
    cols = ["arm", "seeds", "episodes", "judge_calls", "judge_failures", "mean_reward", "final_reward",
            "final_target_share"]
    if episodes.empty:
        return pd.DataFrame(columns=cols)
    ok = judged(episodes)
    tshare = target_share_curve(evals) if evals is not None else pd.DataFrame()
    rows = []
    for arm, g in episodes.groupby("arm", sort=True):
        okg = ok[ok["arm"] == arm]
        finals = [s.sort_values("t")["reward"].tail(window).mean() for _, s in okg.groupby("seed")]
        calls = len(g)
        fails = int(g["judge_error"].notna().sum()) if "judge_error" in g else 0
        if updates is not None and not updates.empty and "judge_calls" in updates:
            u = updates[updates["arm"] == arm]
            if not u.empty:
                calls = max(calls, int(u.groupby("seed")["judge_calls"].max().sum()))
                if "judge_failures" in u:
                    fails = max(fails, int(u.groupby("seed")["judge_failures"].max().sum()))
        share = float("nan")
        if not tshare.empty:
            ts = tshare[tshare["arm"] == arm]
            if not ts.empty:
                share = float(ts.sort_values("t").groupby("seed")["target_share"].last().mean())
        rows.append({"arm": arm, "seeds": int(g["seed"].nunique()), "episodes": int(len(g)), "judge_calls": calls,
                     "judge_failures": fails, "mean_reward": float(okg["reward"].mean()) if len(okg) else float("nan"),
                     "final_reward": float(np.mean(finals)) if finals else float("nan"),
                     "final_target_share": share})
    return pd.DataFrame(rows, columns=cols)

