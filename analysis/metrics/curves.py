"""Curves over the drift clock, from a run directory's tables: the rolling training reward (also
against cumulative judge calls, a trainer's warm-up calls included) and the held-out style shares.
Pure functions of DataFrames; the figures in `analysis.figures.plots` draw them and `analysis.metrics.realign`
measures on them."""

from __future__ import annotations

import numpy as np
import pandas as pd


def judged(episodes: pd.DataFrame) -> pd.DataFrame:
    """Episodes whose judge answered (a failed judge call is excluded, not a zero reward)."""
    if episodes.empty or "reward" not in episodes:
        return episodes.iloc[0:0]
    ok = episodes["reward"].notna()
    if "judge_error" in episodes:
        ok &= episodes["judge_error"].isna()
    return episodes[ok]


def warmup_judge_calls(updates: pd.DataFrame | None) -> int:
    """The judge calls one arm x seed's trainer spent before RL (e.g. SAO's value pretraining):
    the updates table's `warmup_judge_calls` (constant per arm x seed), 0 if absent."""
    if updates is None or updates.empty or "warmup_judge_calls" not in updates:
        return 0
    w = updates["warmup_judge_calls"].dropna()
    return int(w.max()) if not w.empty else 0


def judge_call_counter(episodes: pd.DataFrame, updates: pd.DataFrame | None):
    """A function t -> cumulative judge calls for one arm x seed at clock t: the trainer's warm-up
    calls (`warmup_judge_calls`) plus the calls made for episodes with clock < t. A difference of
    two counts (the calls from a switch to a recovery) does not depend on the warm-up."""
    warmup = float(warmup_judge_calls(updates))
    if updates is not None and not updates.empty and {"t", "judge_calls"} <= set(updates.columns):
        u = updates[["t", "judge_calls"]].dropna().sort_values("t")
        if not u.empty:
            ts = np.concatenate([[0.0], u["t"].to_numpy(float)])
            calls = warmup + np.concatenate([[0.0], u["judge_calls"].to_numpy(float)])
            # beyond the last update: one call per episode row, as counted in the episodes table
            return lambda x: float(np.interp(x, ts, calls)) if x <= ts[-1] else float(calls[-1] + (x - ts[-1]))
    t_all = np.sort(episodes["t"].to_numpy(float)) if not episodes.empty else np.zeros(0)
    return lambda x: warmup + float(np.searchsorted(t_all, x, side="left"))


def rolling_reward(episodes: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per arm and seed, the mean reward of the last `window` judged episodes at each clock t
    (the first quarter-window is NaN-free: at least window // 4 episodes are needed)."""
    ok = judged(episodes)
    out = []
    if not ok.empty:
        for (arm, seed), group in ok.sort_values("t").groupby(["arm", "seed"], sort=True):
            out.append(
                pd.DataFrame(
                    {
                        "arm": arm,
                        "seed": seed,
                        "t": group["t"].to_numpy(),
                        "rolling_reward": group["reward"]
                        .rolling(window, min_periods=max(1, window // 4))
                        .mean()
                        .to_numpy(),
                    }
                )
            )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["arm", "seed", "t", "rolling_reward"])


# Clock values per curve. 150 puts a point every 40 episodes of a 6,000-episode run, well inside
# the 128-episode rolling window, so the line loses nothing; each point costs the figure one
# seaborn bootstrap, which is where a report spends its drawing time.
CURVE_POINTS = 150


def reward_curve(episodes: pd.DataFrame, window: int, points: int = CURVE_POINTS) -> pd.DataFrame:
    """`rolling_reward` thinned to at most `points` clock values per arm and seed, on a grid
    shared by all seeds (so that seaborn can draw bands over seeds): columns arm, seed, t,
    rolling_reward."""
    roll = rolling_reward(episodes, window).dropna(subset=["rolling_reward"])
    if roll.empty:
        return roll
    t_max = int(roll["t"].max())
    step = max(1, int(np.ceil((t_max + 1) / points)))
    grid = np.arange(0, t_max + 1, step)
    out = []
    for (arm, seed), g in roll.groupby(["arm", "seed"], sort=True):
        t, y = g["t"].to_numpy(float), g["rolling_reward"].to_numpy(float)
        keep = grid[(grid >= t.min()) & (grid <= t.max())]
        out.append(pd.DataFrame({"arm": arm, "seed": seed, "t": keep, "rolling_reward": np.interp(keep, t, y)}))
    return pd.concat(out, ignore_index=True)


def judge_call_curve(
    episodes: pd.DataFrame, updates: pd.DataFrame | None, window: int, points: int = CURVE_POINTS
) -> pd.DataFrame:
    """`reward_curve` with a `judge_calls` column: the cumulative judge calls at each t, warm-up
    calls included (so an arm whose trainer spent calls before RL starts where its first judged
    sample was spent)."""
    curve = reward_curve(episodes, window, points)
    if curve.empty:
        return curve.assign(judge_calls=pd.Series(dtype=float))
    parts = []
    for (arm, seed), g in curve.groupby(["arm", "seed"], sort=True):
        ep = episodes[(episodes["arm"] == arm) & (episodes["seed"] == seed)]
        up = None
        if updates is not None and not updates.empty and {"arm", "seed"} <= set(updates.columns):
            up = updates[(updates["arm"] == arm) & (updates["seed"] == seed)]
        count = judge_call_counter(ep, up)
        parts.append(g.assign(judge_calls=[count(x + 1) for x in g["t"]]))
    return pd.concat(parts, ignore_index=True)


def share_curves(evals: pd.DataFrame) -> pd.DataFrame:
    """Held-out style shares: columns arm, seed, t, style, share (one row per evaluation and
    style; missing styles of an evaluation filled with 0)."""
    if evals is None or evals.empty:
        return pd.DataFrame(columns=["arm", "seed", "t", "style", "share"])
    wide = evals.pivot_table(index=["arm", "seed", "t"], columns="style", values="share", aggfunc="mean").fillna(0.0)
    return wide.reset_index().melt(id_vars=["arm", "seed", "t"], var_name="style", value_name="share")


def target_share_curve(evals: pd.DataFrame) -> pd.DataFrame:
    """Per arm, seed and evaluation: the held-out share of the style that was the target at that
    clock, and the held-out reward: columns arm, seed, t, target_style, target_share, eval_reward."""
    cols = ["arm", "seed", "t", "target_style", "target_share", "eval_reward"]
    if evals is None or evals.empty or "target_style" not in evals:
        return pd.DataFrame(columns=cols)
    shares = share_curves(evals)
    targets = (
        evals.groupby(["arm", "seed", "t"], sort=True)
        .agg(
            target_style=("target_style", "first"),
            eval_reward=("eval_reward", "mean") if "eval_reward" in evals else ("share", lambda s: np.nan),
        )
        .reset_index()
    )
    merged = targets.merge(
        shares, left_on=["arm", "seed", "t", "target_style"], right_on=["arm", "seed", "t", "style"], how="left"
    )
    return merged.assign(target_share=merged["share"].fillna(0.0))[cols]
