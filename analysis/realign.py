"""Realignment numbers from a run directory's tables: how reward and held-out style shares move
around each switch of the target style."""

from __future__ import annotations

import pandas as pd


def rolling_reward(episodes: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per arm and seed, the mean reward of the last `window` judged episodes at each clock t."""
    judged = episodes[episodes["judge_error"].isna()].sort_values("t")
    out = []
    for (arm, seed), group in judged.groupby(["arm", "seed"], sort=False):
        out.append(pd.DataFrame({
            "arm": arm, "seed": seed, "t": group["t"].to_numpy(),
            "rolling_reward": group["reward"].rolling(window, min_periods=max(1, window // 4)).mean().to_numpy(),
        }))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["arm", "seed", "t", "rolling_reward"])


def switch_table(episodes: pd.DataFrame, switch_points: list[int], budget: int, window: int = 128) -> pd.DataFrame:
    """One row per arm, seed and switch T:
      before  mean reward of the `window` episodes before T,
      dip     the lowest rolling mean (over `window` episodes, all after T) before the next switch,
      late    mean reward of the last `window` episodes before the next switch (or the end).
    The window shrinks to a quarter of the shortest phase so short test runs stay meaningful."""
    bounds = [0, *switch_points, budget]
    window = max(1, min(window, min(b - a for a, b in zip(bounds, bounds[1:])) // 4))
    judged = episodes[episodes["judge_error"].isna()]
    rows = []
    for (arm, seed), group in judged.groupby(["arm", "seed"], sort=True):
        group = group.sort_values("t")
        t, r = group["t"].to_numpy(), group["reward"].to_numpy(dtype=float)
        for i, switch in enumerate(switch_points):
            end = bounds[i + 2]
            before = r[(t >= switch - window) & (t < switch)]
            after = pd.Series(r[(t >= switch) & (t < end)])
            late = r[(t >= end - window) & (t < end)]
            rows.append({
                "arm": arm, "seed": seed, "switch": i + 1, "t": switch,
                "before": before.mean() if len(before) else float("nan"),
                "dip": after.rolling(window).mean().min() if len(after) >= window else float("nan"),
                "late": late.mean() if len(late) else float("nan"),
                "window": window,
            })
    return pd.DataFrame(rows)


def phase_shares(evals: pd.DataFrame, switch_points: list[int], budget: int) -> pd.DataFrame:
    """Held-out share of each phase's target style at the phase's first and last evaluation."""
    bounds = [0, *switch_points, budget + 1]
    rows = []
    for (arm, seed), group in evals.groupby(["arm", "seed"], sort=True):
        for i in range(len(bounds) - 1):
            phase = group[(group["t"] >= bounds[i]) & (group["t"] < bounds[i + 1])]
            if phase.empty:
                continue
            target = phase.sort_values("t")["target_style"].iloc[-1]
            shares = phase[phase["style"] == target].sort_values("t")["share"].to_numpy()
            rows.append({"arm": arm, "seed": seed, "phase": i + 1, "target": target,
                         "share_first": shares[0], "share_last": shares[-1]})
    return pd.DataFrame(rows)
