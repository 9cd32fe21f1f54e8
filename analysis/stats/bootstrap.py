"""rliable's stratified bootstrap, reproducible for a seed: the intervals of analysis/metrics/nonstationary.py
(per arm, metric and task; probability of improvement) and of `realign.bootstrap_ci` (one metric's
mean over seeds). rliable draws its resamples from numpy's global generator, which is seeded for
the call and restored after (analysis/stats/rliable_compat.py)."""

from __future__ import annotations

import numpy as np

from analysis.stats.rliable_compat import _rliable, seeded_global_rng


def stratified_bootstrap(scores: list[np.ndarray], statistic, reps: int, confidence: float, seed: int):
    """rliable's stratified bootstrap (seeds resampled within each task, each matrix on its own)
    of `statistic(*scores)`: (low, high) arrays, reproducible for `seed`."""
    rly, _ = _rliable()
    with seeded_global_rng(seed):
        _, ci = rly.get_interval_estimates({"x": scores}, statistic, reps=reps, confidence_interval_size=confidence)
    return ci["x"][0], ci["x"][1]


def bootstrap_mean(values: np.ndarray, reps: int, confidence: float, seed: int) -> tuple[float, float]:
    """rliable's bootstrap interval of the mean of one metric's values over seeds (one task)."""
    low, high = stratified_bootstrap(
        [np.asarray(values, dtype=float)[:, None]], lambda s: np.array([s.mean()]), reps, confidence, seed
    )
    return float(low[0]), float(high[0])
