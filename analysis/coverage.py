"""How often a 95% interval of a paired difference covers the true one, when each seed gives several
correlated events (the switches of a many-switch schedule): a simulation on synthetic data with a
known effect.

    python -m analysis.coverage [--reps 4000] [--seeds 5 10 30] [--events 4] [--rho 0.5]

The model, per seed i and event j (a switch), of the paired difference X - Y:

    d_ij = effect + a_i + e_ij,   a_i ~ N(0, seed_sd^2),   e_i. ~ AR(1) over j with correlation rho

`a_i` is what a seed's events share (its SFT policy, its history); `rho` plants a further
correlation between neighbouring events. `noise: skewed` draws e from a centred exponential
instead (first-passage times are skewed), to see how far the t interval's coverage leans on
normality at few seeds.

The methods compared, each on the same simulated data:
  seed_means_t      the project's verdict (analysis/stats/paired.py's "all" row): each seed's mean over its
                    events, then a paired Student-t interval over seeds (n - 1 degrees of freedom);
  cluster_bootstrap the percentile bootstrap of the mean, resampling whole seeds (all their events);
  events_as_iid_t   a t interval over all n x m events as if they were independent: what ignoring the
                    clustering would give (it under-covers as soon as events of a seed correlate).
"""

from __future__ import annotations

import argparse
import sys
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

METHODS = ("seed_means_t", "cluster_bootstrap", "events_as_iid_t")


def synthetic_differences(
    rng: np.random.Generator,
    reps: int,
    seeds: int,
    events: int,
    effect: float = 1.0,
    seed_sd: float = 1.0,
    event_sd: float = 1.0,
    rho: float = 0.5,
    noise: Literal["normal", "skewed"] = "normal",
) -> np.ndarray:
    """[reps, seeds, events] paired differences under the model of the module docstring."""
    shared = rng.normal(0.0, seed_sd, size=(reps, seeds, 1))
    if noise == "normal":
        innovations = rng.normal(0.0, 1.0, size=(reps, seeds, events))
    else:  # a centred exponential: mean 0, sd 1, skewness 2
        innovations = rng.exponential(1.0, size=(reps, seeds, events)) - 1.0
    e = np.empty_like(innovations)
    e[..., 0] = innovations[..., 0]
    for j in range(1, events):  # AR(1) with unit stationary variance
        e[..., j] = rho * e[..., j - 1] + np.sqrt(1 - rho**2) * innovations[..., j]
    return effect + shared + event_sd * e


def intervals(d: np.ndarray, method: str, confidence: float, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """[reps, 2] interval bounds of the mean difference, per replicate, by `method`."""
    reps, seeds, _ = d.shape
    q = 0.5 + confidence / 2
    if method == "seed_means_t":
        m = d.mean(axis=2)
        se = m.std(axis=1, ddof=1) / np.sqrt(seeds)
        half = stats.t.ppf(q, seeds - 1) * se
        centre = m.mean(axis=1)
    elif method == "events_as_iid_t":
        flat = d.reshape(reps, -1)
        se = flat.std(axis=1, ddof=1) / np.sqrt(flat.shape[1])
        half = stats.t.ppf(q, flat.shape[1] - 1) * se
        centre = flat.mean(axis=1)
    elif method == "cluster_bootstrap":
        m = d.mean(axis=2)  # resampling whole seeds = resampling their means (equal events per seed)
        idx = rng.integers(0, seeds, size=(n_boot, seeds))
        boot = m[:, idx].mean(axis=2)  # [reps, n_boot]
        lo, hi = np.percentile(boot, [100 * (1 - q), 100 * q], axis=1)
        return np.stack([lo, hi], axis=1)
    else:
        raise ValueError(f"unknown method {method!r}: one of {', '.join(METHODS)}")
    return np.stack([centre - half, centre + half], axis=1)


def coverage_table(
    seeds: list[int],
    reps: int = 4000,
    events: int = 4,
    rho: float = 0.5,
    effect: float = 1.0,
    seed_sd: float = 1.0,
    event_sd: float = 1.0,
    noise: Literal["normal", "skewed"] = "normal",
    confidence: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Achieved coverage (share of replicates whose interval holds `effect`) and mean width, per
    number of seeds and method; `mc_se` is the coverage's Monte Carlo standard error."""
    rows = []
    for n in seeds:
        rng = np.random.default_rng([seed, n])
        d = synthetic_differences(rng, reps, n, events, effect, seed_sd, event_sd, rho, noise)
        for method in METHODS:
            bounds = intervals(d, method, confidence, rng, n_boot)
            covered = (bounds[:, 0] <= effect) & (effect <= bounds[:, 1])
            cov = float(covered.mean())
            rows.append(
                {
                    "seeds": n,
                    "events": events,
                    "rho": rho,
                    "noise": noise,
                    "method": method,
                    "nominal": confidence,
                    "coverage": cov,
                    "mc_se": float(np.sqrt(cov * (1 - cov) / reps)),
                    "mean_width": float((bounds[:, 1] - bounds[:, 0]).mean()),
                }
            )
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 10, 30])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--seed-sd", type=float, default=1.0, help="sd of what a seed's events share")
    parser.add_argument("--event-sd", type=float, default=1.0)
    parser.add_argument("--noise", choices=["normal", "skewed"], nargs="+", default=["normal", "skewed"])
    args = parser.parse_args(argv)
    tables = [
        coverage_table(
            args.seeds, args.reps, args.events, args.rho, seed_sd=args.seed_sd, event_sd=args.event_sd, noise=noise
        )
        for noise in args.noise
    ]
    table = pd.concat(tables, ignore_index=True)
    wide = table.pivot_table(index=["noise", "seeds"], columns="method", values="coverage").reindex(
        columns=list(METHODS)
    )
    print(f"coverage of nominal 95% intervals ({args.reps} replicates each, {args.events} events per seed, "
          f"rho {args.rho}, seed sd {args.seed_sd}, event sd {args.event_sd}; Monte Carlo se ~0.003):")  # fmt: skip
    print(wide.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
