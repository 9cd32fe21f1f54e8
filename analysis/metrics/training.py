"""What the training data was like, per arm: how off-policy (the asynchronous runtime) and how
multi-turn (the revision env). Tables for the report, from a run's episodes, updates and dropped
tables."""

from __future__ import annotations

import pandas as pd

from analysis.metrics.curves import judged
from analysis.metrics.realign import DEFAULT_WINDOW
from analysis.metrics.recovery import Switches, switch_count, switches_for


def offpolicy_overview(
    episodes: pd.DataFrame, updates: pd.DataFrame | None = None, dropped: pd.DataFrame | None = None, max_bin: int = 4
) -> pd.DataFrame:
    """One row per arm: how off-policy its training data was (the asynchronous runtime).

    staleness_shares  share of the trained episodes trained at staleness 0, 1, ..., `max_bin`+
                      (policy versions between the one that generated an episode and the one
                      trained on it)
    staleness_mean    over those episodes
    dropped           episodes older than max_staleness at dequeue: stored, never trained on
    crossed_switch    share of judged episodes whose target changed between generation and judging
    dis_masked_frac   mean over updates of the share of action tokens DIS masked (NaN: no DIS)
    clip_frac         mean over updates of the share PPO clip cut (NaN: no PPO clip)
    """
    cols = [
        "arm",
        "episodes",
        "staleness_shares",
        "staleness_mean",
        "dropped",
        "crossed_switch",
        "dis_masked_frac",
        "clip_frac",
    ]
    if episodes.empty or "staleness" not in episodes:
        return pd.DataFrame(columns=cols)
    ok = judged(episodes)
    rows = []
    for arm, g in ok.groupby("arm", sort=True):
        trained = g[g["trained"].astype(bool)] if "trained" in g else g  # dropped and left-over ones were not
        stale = trained["staleness"].dropna().astype(int).clip(upper=max_bin)
        counts = stale.value_counts(normalize=True).reindex(range(max_bin + 1), fill_value=0.0)
        stale = trained["staleness"].dropna().astype(float)
        crossed = (g["generation_target"] != g["target_style"]).mean() if "generation_target" in g else float("nan")
        u = updates[updates["arm"] == arm] if updates is not None and not updates.empty else pd.DataFrame()
        rows.append(
            {
                "arm": arm,
                "episodes": len(g),
                "staleness_shares": {(f"{k}+" if k == max_bin else str(k)): float(v) for k, v in counts.items()},
                "staleness_mean": float(stale.mean()) if len(stale) else float("nan"),
                "dropped": int((dropped["arm"] == arm).sum()) if dropped is not None and not dropped.empty else 0,
                "crossed_switch": float(crossed),
                "dis_masked_frac": float(u["dis_masked_frac"].mean())
                if "dis_masked_frac" in u and u["dis_masked_frac"].notna().any()
                else float("nan"),
                "clip_frac": float(u["clip_frac"].mean())
                if "clip_frac" in u and u["clip_frac"].notna().any()
                else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=cols)


def _first_draft_reward(row: pd.Series) -> float:
    """The first draft's reward: its editor's read for a revised episode, else the episode's."""
    earlier = row["turn_rewards"]
    if isinstance(earlier, str) and earlier:
        first = earlier.split(";")[0]
        return float("nan") if first == "x" else float(first)
    return float(row["reward"])


def turns_overview(episodes: pd.DataFrame, window: int = DEFAULT_WINDOW) -> pd.DataFrame:
    """One row per arm of a multi-turn run (RevisionEnv): what revising bought.

    turns             mean drafts per judged episode
    accepted_early    share of episodes whose editor accepted a draft before the last allowed one
    first_reward      mean reward of the first drafts (the editor's read; the episode's for one draft)
    final_reward      mean reward of the last drafts (the episode reward)
    gain              final_reward - first_reward: what the notes and revisions added
    *_end             the same over each seed's last `window` judged episodes (mean over seeds)
    """
    cols = [
        "arm",
        "turns",
        "accepted_early",
        "first_reward",
        "final_reward",
        "gain",
        "turns_end",
        "first_reward_end",
        "final_reward_end",
        "gain_end",
    ]
    if episodes.empty or "turns" not in episodes or episodes["turns"].max() <= 1:
        return pd.DataFrame(columns=cols)
    ok = judged(episodes).copy()
    ok["first"] = ok.apply(_first_draft_reward, axis=1)
    ok["early"] = ok["editor_calls"] == ok["turns"]
    rows = []
    for arm, g in ok.groupby("arm", sort=True):
        tail = pd.concat([s.sort_values("t").tail(window) for _, s in g.groupby("seed")])
        ends = tail.groupby("seed")[["turns", "first", "reward"]].mean().mean()
        rows.append(
            {
                "arm": arm,
                "turns": float(g["turns"].mean()),
                "accepted_early": float(g["early"].mean()),
                "first_reward": float(g["first"].mean()),
                "final_reward": float(g["reward"].mean()),
                "gain": float(g["reward"].mean() - g["first"].mean()),
                "turns_end": float(ends["turns"]),
                "first_reward_end": float(ends["first"]),
                "final_reward_end": float(ends["reward"]),
                "gain_end": float(ends["reward"] - ends["first"]),
            }
        )
    return pd.DataFrame(rows, columns=cols)


# The update statistics that say what a baseline knew (name -> what it is); medians over updates,
# because explained variance explodes negatively on a batch whose rewards are (almost) all equal.
BASELINE_STATS = {
    "value_explained_variance": "critic EV (all response tokens, before the batch's critic steps)",
    "first_value_ev": "EV of the critic's value at the first response token for the episode reward",
    "first_value_std": "spread of that first-token value over the batch's prompts",
    "first_value_mean": "mean first-token value",
    "reward_mean": "mean reward of the batch",
    "advantage_abs_mean": "mean |advantage| over response tokens",
}


def baseline_overview(updates: pd.DataFrame, switch_points: Switches, budget: int) -> pd.DataFrame:
    """Per arm and phase: the median over updates (all seeds) of each `BASELINE_STATS` column the
    arm logs (SAO logs the critic's; every arm its reward and advantages), and `updates`. Per-pair
    switch points ({(arm, seed): [...]}): phase k is each seed's own k-th phase."""
    from analysis.metrics.realign import phase_bounds

    cols = ["arm", "phase", "updates", *BASELINE_STATS]
    if updates is None or updates.empty or "t" not in updates:
        return pd.DataFrame(columns=cols)
    rows = []
    for arm, g in updates.groupby("arm", sort=True):
        seeds = g["seed"] if "seed" in g else pd.Series(0, index=g.index)
        own = {s: phase_bounds(switches_for(switch_points, arm, s), budget) for s in seeds.unique()}
        for i in range(switch_count(switch_points) + 1):
            a = seeds.map(lambda s, i=i, own=own: own[s][i] if i + 1 < len(own[s]) else budget)
            b = seeds.map(lambda s, i=i, own=own: own[s][i + 1] if i + 1 < len(own[s]) else budget)
            part = g[(g["t"] > a) & (g["t"] <= b)]  # an update at t trained on episodes before t
            row = {"arm": arm, "phase": i + 1, "updates": len(part)}
            for stat in BASELINE_STATS:
                values = pd.to_numeric(part[stat], errors="coerce") if stat in part else pd.Series(dtype=float)
                row[stat] = float(values.median()) if values.notna().any() else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)
