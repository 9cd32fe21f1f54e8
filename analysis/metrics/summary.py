"""The realignment metrics summed up over seeds: one row per arm and switch (`aggregate`: each
metric's mean with its bootstrap interval, the counts and the Kaplan-Meier median of the time to the
bar) and one row per arm for the whole run (`arm_overview`). The per-seed metrics and their
definitions are analysis.metrics.realign's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics.curves import judged, target_share_curve, warmup_judge_calls
from analysis.metrics.realign import ALIASES, DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, DEFAULT_WINDOW, METRICS, bootstrap_ci
from analysis.metrics.recovery import bar_summary
from analysis.phases import SWITCH_KINDS

AGGREGATE_COUNTS = [
    "seeds",
    "seeds_with_data",
    "recovered_own_plateau",
    "bar",
    "bar_source",
    "bar_seeds",
    "reached_bar",
    "follow_up",
    "km_median",
    "km_median_lo",
    "km_median_hi",
]


def aggregate(
    per_seed: pd.DataFrame,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per arm (and run, if there is a `run` column) and switch: for each metric in
    `metrics` (default `METRICS`), `<metric>` (mean over seeds), `<metric>_lo`, `<metric>_hi`
    (bootstrap interval) and `<metric>_n` (seeds with a value); plus the counts and the
    Kaplan-Meier median of `AGGREGATE_COUNTS` (see the module docstring), and each alias of
    `ALIASES` repeating its metric's columns."""
    metrics = list(METRICS) if metrics is None else list(metrics)
    keys = [k for k in ("run", "arm", "switch", "t", *SWITCH_KINDS) if k in per_seed.columns]
    columns = [*keys, *AGGREGATE_COUNTS]
    for m in [*metrics, *(a for a, m in ALIASES.items() if m in metrics)]:
        columns += [m, f"{m}_lo", f"{m}_hi", f"{m}_n"]
    if per_seed.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, g in per_seed.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update(
            seeds=int(g["seed"].nunique()),
            seeds_with_data=int(g["status"].isin(["recovered", "not recovered"]).sum()),
            recovered_own_plateau=int(g["recovered_own_plateau"].astype(bool).sum()),
        )
        row.update(bar_summary(g, confidence))
        for m in metrics:
            vals = g[m].to_numpy(float) if m in g else np.zeros(0)
            mean, lo, hi = bootstrap_ci(vals, confidence, n_boot, seed)
            row.update({m: mean, f"{m}_lo": lo, f"{m}_hi": hi, f"{m}_n": int(np.isfinite(vals).sum())})
        for alias, m in ALIASES.items():
            if m in metrics:
                row.update({alias + s: row[m + s] for s in ("", "_lo", "_hi", "_n")})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def frozen_policy_episodes(updates: pd.DataFrame) -> float:
    """The episodes one arm x seed trained its critic alone before its policy's first update (SAO's
    critic-only warm-up: `value_warmup_updates`): the clock of the first update with a policy loss.
    0 for an arm whose every update moves its policy."""
    if updates.empty or "t" not in updates:
        return 0.0
    u = updates.sort_values("update")
    if "value_warmup" in u:  # SAO marks its critic-only updates
        warm = u[u["value_warmup"].fillna(0) > 0]
        return float(warm["t"].max()) if not warm.empty else 0.0
    if "policy_loss" not in u:
        return 0.0
    moved = u[u["policy_loss"].notna()]
    if moved.empty:
        return float(u["t"].max())
    earlier = u[u["update"] < moved["update"].iloc[0]]
    return float(earlier["t"].max()) if not earlier.empty else 0.0


def arm_overview(
    episodes: pd.DataFrame,
    evals: pd.DataFrame | None = None,
    updates: pd.DataFrame | None = None,
    window: int = DEFAULT_WINDOW,
) -> pd.DataFrame:
    """One row per arm: seeds, episodes, judge calls (all of them: each seed's training calls plus
    its trainer's warm-up calls, `warmup_judge_calls`, also shown on their own) and failures, the
    episodes its policy stood still while the critic alone trained (`frozen_policy_episodes`, mean
    over seeds; they count toward the first phase's regret), the
    mean reward over the run and over each seed's last `window` judged episodes (mean over seeds),
    and the held-out share of the final target style at the last evaluation (mean over seeds)."""
    cols = [
        "arm",
        "seeds",
        "episodes",
        "judge_calls",
        "warmup_judge_calls",
        "frozen_policy_episodes",
        "judge_failures",
        "mean_reward",
        "final_reward",
        "final_target_share",
    ]
    if episodes.empty:
        return pd.DataFrame(columns=cols)
    ok = judged(episodes)
    tshare = target_share_curve(evals) if evals is not None else pd.DataFrame()
    rows = []
    for arm, g in episodes.groupby("arm", sort=True):
        okg = ok[ok["arm"] == arm]
        finals = [s.sort_values("t")["reward"].tail(window).mean() for _, s in okg.groupby("seed")]
        calls, warmup, frozen = len(g), 0, 0.0
        fails = int(g["judge_error"].notna().sum()) if "judge_error" in g else 0
        u = updates[updates["arm"] == arm] if updates is not None and not updates.empty and "arm" in updates else None
        if u is not None and not u.empty:
            warmup = int(sum(warmup_judge_calls(s) for _, s in u.groupby("seed")))
            frozen = float(np.mean([frozen_policy_episodes(s) for _, s in u.groupby("seed")]))
            if "judge_calls" in u:
                calls = max(calls, int(u.groupby("seed")["judge_calls"].max().sum()))
            if "judge_failures" in u:
                fails = max(fails, int(u.groupby("seed")["judge_failures"].max().sum()))
        share = float("nan")
        if not tshare.empty:
            ts = tshare[tshare["arm"] == arm]
            if not ts.empty:
                share = float(ts.sort_values("t").groupby("seed")["target_share"].last().mean())
        rows.append(
            {
                "arm": arm,
                "seeds": int(g["seed"].nunique()),
                "episodes": len(g),
                "judge_calls": calls + warmup,
                "warmup_judge_calls": warmup,
                "frozen_policy_episodes": frozen,
                "judge_failures": fails,
                "mean_reward": float(okg["reward"].mean()) if len(okg) else float("nan"),
                "final_reward": float(np.mean(finals)) if finals else float("nan"),
                "final_target_share": share,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def seed_means(per_seed: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """One row per run, arm and seed: each switch metric's mean over the seed's switches (`events`
    of them) and each segment metric's over the segments after a switch: the unit a paired verdict
    compares (analysis/stats/paired.py's "all"), since the events of one seed are not independent."""
    keys = [k for k in ("run", "arm", "seed") if k in per_seed]
    if per_seed.empty or not keys:
        return pd.DataFrame()
    numeric = [c for c in per_seed.select_dtypes("number").columns if c not in (*keys, "switch", "t")]
    out = per_seed.groupby(keys, sort=False)[numeric].mean()
    out.insert(0, "events", per_seed.groupby(keys, sort=False).size())
    if not segments.empty and "segment" in segments:
        after = segments[segments["segment"] > 0]
        seg_numeric = [c for c in after.select_dtypes("number").columns if c not in (*keys, "segment", "start", "end")]
        out = out.join(after.groupby(keys, sort=False)[seg_numeric].mean().add_prefix("segment_"), how="left")
    return out.reset_index()
