"""Per arm, seed and segment between switches: reward area, plateau and dynamic regret against a
reference reward (the run's reference policy, or the best arm without one). The definitions are in
`analysis.metrics.nonstationary`'s docstring, which re-exports `segment_metrics`. Pure functions."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics import phases as pair_phases
from analysis.metrics import realign, recovery
from analysis.metrics.curves import judged
from analysis.metrics.recovery import Switches

REFERENCE, BEST_ARM = "reference", "best arm"  # what a segment's regret is measured against

SEGMENT_COLUMNS = [
    "arm",
    "seed",
    "segment",
    "start",
    "end",
    "target_style",
    "judge",
    "window",
    "episodes",
    "auc",
    "plateau",
    "best_plateau",
    "best_arm",
    "reference_reward",
    "regret_against",
    "regret",
    "dynamic_regret",
]


def _segment_rows(
    ok: pd.DataFrame, episodes: pd.DataFrame, switch_points: Switches, budget: int, window: int
) -> pd.DataFrame:
    """Per arm, seed and segment (each pair's own with per-pair `switch_points`): episodes, reward
    sum, auc and plateau (and `run` where `ok` has it)."""
    rows = []
    shared = pair_phases.shared_targets(switch_points, episodes, None, budget)
    for (arm, seed), g in ok.sort_values("t").groupby(["arm", "seed"], sort=True):
        _, bounds, targets = pair_phases.pair_schedule(switch_points, budget, episodes, None, arm, seed, shared)
        t, r = g["t"].to_numpy(), g["reward"].to_numpy(float)
        judges = realign.phase_judges(g, None, bounds[1:-1], bounds[-1])  # a schedule that changes the judge
        run = {"run": g["run"].iloc[0]} if "run" in g else {}
        for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
            seg = r[(t >= a) & (t < b)]
            rows.append(
                {
                    "arm": arm,
                    "seed": seed,
                    **run,
                    "segment": k,
                    "start": a,
                    "end": b,
                    "target_style": targets[k],
                    "judge": judges[k],
                    "window": window,
                    "episodes": int(seg.size),
                    "reward_sum": float(seg.sum()),
                    "auc": float(seg.mean()) if seg.size else np.nan,
                    "plateau": float(seg[-window:].mean()) if seg.size else np.nan,
                }
            )
    return pd.DataFrame(rows)


def _against(out: pd.DataFrame, reference: pd.DataFrame | None) -> pd.DataFrame:
    """`reference_reward` and `regret_against`: the reference table's reward of the seed's phase
    where there is one (matched on run too when both tables have it), else the best arm's plateau."""
    ref = recovery.reference_rewards(reference).rename(columns={"phase": "segment"})
    keys = [k for k in ("run", "seed", "segment") if k in ref.columns and k in out.columns]
    if ref.empty:
        out = out.assign(reference_reward=np.nan)
    else:
        out = out.merge(ref[[*keys, "reference_reward"]], on=keys, how="left")
    has_ref = out["reference_reward"].notna()
    return out.assign(
        regret_against=np.where(has_ref, REFERENCE, BEST_ARM),
        reference_reward=out["reference_reward"].where(has_ref, out["best_plateau"]),
    )


def segment_metrics(
    episodes: pd.DataFrame,
    switch_points: Switches,
    budget: int,
    window: int | None = None,
    reference: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per arm, seed and segment (columns `SEGMENT_COLUMNS`; see the module docstring).
    `reference` is the run's `reference` table (None or empty: regret against the best arm).
    A seed without judged episodes in a segment has a row with episodes 0 and NaN metrics.
    Per-pair `switch_points` ({(arm, seed): [...]}, `RunData.switches`): each pair's segments run
    between its own switches (`start`, `end` its own); segment k of every pair is compared alike."""
    window = realign.auto_window(switch_points, budget, window)
    ok = judged(episodes)
    if ok.empty:
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    out = _segment_rows(ok, episodes, switch_points, budget, window)
    # the best arm: per segment, the highest mean plateau over an arm's seeds
    arm_plateau = out.groupby(["segment", "arm"], sort=True)["plateau"].mean().dropna()
    best = {k: (float(p.max()), p.idxmax()[1]) for k, p in arm_plateau.groupby(level="segment")}
    out["best_plateau"] = out["segment"].map(lambda k: best.get(k, (np.nan, None))[0])
    out["best_arm"] = out["segment"].map(lambda k: best.get(k, (np.nan, None))[1])
    out = _against(out, reference)
    # sum of (reference - reward) over the episodes; NaN where the segment has none
    has = out["episodes"] > 0
    out["regret"] = (out["episodes"] * out["reference_reward"] - out["reward_sum"]).where(has)
    out["dynamic_regret"] = out["regret"] / out["episodes"].where(has)
    return out[SEGMENT_COLUMNS]
