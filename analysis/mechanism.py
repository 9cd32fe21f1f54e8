"""The mechanism a critic should win by, measured in a run before any verdict is read from it.

    python -m analysis.mechanism RUN_DIR [--first 10] [--tolerance 0.05]

The paper's account: after a switch the running mean's window "stays biased toward the previous
distribution", while a critic's baseline depends on the state (the prompt). Two things must hold in
a world for that to matter, and this module measures both from `updates.parquet`:

  explained      per arm and phase, the mean over its updates of the share of the batch's reward
                 variance the arm's baseline explains: SAO's first-token value (`first_value_ev`, out
                 of sample: the critic before its steps on the batch), the running mean's window or
                 per-prompt windows or the upper-bound baseline (`baseline_ev`). A global window
                 explains 0 by construction; what a prompt-aware baseline can explain is the
                 upper-bound arm's figure.
  lag            per arm and switch, how far the baseline sits from the rewards it is subtracted from
                 after the switch: `bias` = the mean over the first `first` updates after the switch of
                 (the batch's mean baseline - its mean reward), in reward; `updates_to_unbiased` = the
                 updates after the switch until that gap stays under `tolerance` for 3 updates in a
                 row (censored at the phase's end: `>N`). The running mean's baseline is `baseline`,
                 SAO's is its first-token value's mean (`first_value_mean`).

A world where every baseline explains ~0 and the lag clears in a few updates has no room for a
critic to win: a null between SAO and the running mean there says nothing about the mechanism.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

EXPLAINED = ("first_value_ev", "baseline_ev")  # SAO's critic; the running mean's baselines
BASELINE = ("baseline", "first_value_mean")


def _phases(switches: list[int], budget: int) -> list[tuple[int, int, int]]:
    edges = [0, *switches, budget]
    return [(i, a, b) for i, (a, b) in enumerate(zip(edges, edges[1:]))]


def explained(updates: pd.DataFrame, switches: list[int], budget: int) -> pd.DataFrame:
    """Per arm, seed and phase: the mean share of reward variance the arm's baseline explains."""
    rows = []
    for (arm, seed), u in updates.groupby(["arm", "seed"], sort=False):
        column = next((c for c in EXPLAINED if c in u and u[c].notna().any()), None)
        if column is None:
            continue
        for phase, start, end in _phases(switches, budget):
            inside = u[(u["t"] > start) & (u["t"] <= end)]
            rows.append(
                {"arm": arm, "seed": seed, "phase": phase, "of": column, "explained": float(inside[column].mean())}
            )
    return pd.DataFrame(rows)


def lag(
    updates: pd.DataFrame, switches: list[int], budget: int, first: int = 10, tolerance: float = 0.05
) -> pd.DataFrame:
    """Per arm, seed and switch: the baseline's bias after the switch and the updates until it clears."""
    rows = []
    ends = [*switches[1:], budget]
    for (arm, seed), u in updates.groupby(["arm", "seed"], sort=False):
        column = next((c for c in BASELINE if c in u and u[c].notna().any()), None)
        if column is None or "reward_mean" not in u:
            continue
        u = u.sort_values("update")
        for k, (switch, end) in enumerate(zip(switches, ends), start=1):
            after = u[(u["t"] > switch) & (u["t"] <= end)]
            gap = (after[column] - after["reward_mean"]).to_numpy(dtype=float)
            close = np.abs(gap) < tolerance
            run = np.convolve(close.astype(int), np.ones(3, dtype=int), mode="valid") == 3 if gap.size >= 3 else []
            hits = np.flatnonzero(run)
            rows.append(
                {
                    "arm": arm,
                    "seed": seed,
                    "switch": k,
                    "baseline_of": column,
                    "bias": float(np.mean(gap[:first])) if gap.size else float("nan"),
                    "updates_to_unbiased": float(hits[0]) if hits.size else float("nan"),
                    "censored_at": int(gap.size),
                }
            )
    return pd.DataFrame(rows)


def summary(run_dir: str | Path, first: int = 10, tolerance: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(explained per arm and phase, lag per arm and switch), each the mean over seeds."""
    from analysis.run_data import load_run

    run = load_run(run_dir)
    switches, budget = run.switch_points, run.budget
    ex = explained(run.updates, switches, budget)
    lg = lag(run.updates, switches, budget, first, tolerance)
    ex_mean = ex.groupby(["arm", "of", "phase"], sort=False)["explained"].agg(["mean", "std", "count"]).reset_index()
    lg_mean = (
        lg.assign(unbiased_within=lg["updates_to_unbiased"].notna())
        .groupby(["arm", "baseline_of", "switch"], sort=False)
        .agg(
            bias=("bias", "mean"),
            bias_sd=("bias", "std"),
            updates_to_unbiased=("updates_to_unbiased", "mean"),
            cleared=("unbiased_within", "sum"),
            seeds=("bias", "count"),
        )
        .reset_index()
    )
    return ex_mean, lg_mean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.mechanism", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run directory")
    parser.add_argument("--first", type=int, default=10, help="updates after a switch the bias is averaged over")
    parser.add_argument(
        "--tolerance", type=float, default=0.05, help="a baseline within this of the rewards is unbiased"
    )
    args = parser.parse_args(argv)
    try:
        ex, lg = summary(args.run, args.first, args.tolerance)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("Share of the batch's reward variance each arm's baseline explains, per phase (mean, sd over seeds):")
    print(ex.round(3).to_string(index=False))
    print(f"\nThe baseline's bias after each switch (first {args.first} updates; baseline - reward) and the updates "
          f"until it stays within {args.tolerance} (mean over the seeds that cleared; cleared of seeds):")  # fmt: skip
    print(lg.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
