"""The statistics of a paired comparison between two arms, as pure functions of per-seed values:
Student-t and Welch intervals, the probability that one arm is better, bootstrap intervals (paired:
one resample of seeds for both arms), and power (the minimum detectable difference, the seeds a
difference needs). analysis.stats.paired turns them into the verdict tables; its docstring says why t."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TypeAlias

import numpy as np
from scipy import stats

Values: TypeAlias = Sequence[float] | np.ndarray  # one arm's values over seeds

DEFAULT_CONFIDENCE = 0.95
DEFAULT_N_BOOT = 2000
DEFAULT_ALPHA, DEFAULT_POWER = 0.05, 0.80
SEED_CAP = 1000
NAN = float("nan")


# ----------------------------------------------------------------------------------------------
# intervals


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student t's quantile (cached: a report and the power test ask for the same few many times)."""
    return float(stats.t.ppf(q, df))


def t_interval(mean: float, se: float, df: float, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
    """mean +- t_{(1+confidence)/2, df} se; a zero se gives the point, an undefined one NaN."""
    if not (np.isfinite(se) and np.isfinite(df) and df > 0):
        return NAN, NAN
    half = t_quantile(0.5 + confidence / 2, float(df)) * se if se > 0 else 0.0
    return mean - half, mean + half


def paired_t_interval(d: Values, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high) of the per-seed differences `d`: the Student-t interval, n - 1 degrees
    of freedom. One difference: no interval (NaN bounds)."""
    d = np.asarray(d, dtype=float)
    if d.size == 0:
        return NAN, NAN, NAN
    mean = float(d.mean())
    if d.size == 1:
        return mean, NAN, NAN
    return (mean, *t_interval(mean, float(d.std(ddof=1)) / np.sqrt(d.size), d.size - 1, confidence))


def welch_se_df(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Welch's standard error of mean(x) - mean(y) and its Welch-Satterthwaite degrees of freedom
    (NaN under two values in an arm; both variances 0: se 0)."""
    if x.size < 2 or y.size < 2:
        return NAN, NAN
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    if se == 0:
        return 0.0, float(x.size + y.size - 2)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return se, float(df)


def welch_interval(x: Values, y: Values, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, float]:
    """(mean(x) - mean(y), low, high): Welch's t interval for arms that share no seeds."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return NAN, NAN, NAN
    diff = float(x.mean() - y.mean())
    se, df = welch_se_df(x, y)
    return (diff, *t_interval(diff, se, df, confidence))


def _score(x: np.ndarray, y: np.ndarray, lower: bool) -> np.ndarray:
    """1 where x is better than y, 0.5 on a tie, 0 where worse (elementwise)."""
    better = (x < y) if lower else (x > y)
    return better + 0.5 * (x == y)


def p_better(x: Values, y: Values, lower: bool, paired: bool = True) -> float:
    """P(X better than Y): paired, the share of seeds (x[i] vs y[i]) where X is better, ties
    half; unpaired, over every pair of a value of X and one of Y."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0 or y.size == 0:
        return NAN
    return float(_score(x, y, lower).mean() if paired else _score(x[:, None], y[None, :], lower).mean())


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    lo, hi = np.percentile(values, [50 * (1 - confidence), 50 * (1 + confidence)])
    return float(lo), float(hi)


def paired_bootstrap(
    x: Values,
    y: Values,
    lower: bool,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> dict[str, float]:
    """Percentile intervals of mean(x - y) and of the paired P(X better) under ONE resample of
    seeds applied to both arms (x[i], y[i] are seed i's): boot_lo, boot_hi, p_better_lo,
    p_better_hi. Under two seeds: NaN."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2:
        return dict(boot_lo=NAN, boot_hi=NAN, p_better_lo=NAN, p_better_hi=NAN)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    xb, yb = x[idx], y[idx]  # the same seeds for both arms
    lo, hi = _percentiles((xb - yb).mean(axis=1), confidence)
    p_lo, p_hi = _percentiles(_score(xb, yb, lower).mean(axis=1), confidence)
    return dict(boot_lo=lo, boot_hi=hi, p_better_lo=p_lo, p_better_hi=p_hi)


def unpaired_bootstrap(
    x: Values,
    y: Values,
    lower: bool,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> dict[str, float]:
    """As `paired_bootstrap`, each arm's values resampled on their own (and P(X better) over all
    pairs); NaN when an arm has under two values."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or y.size < 2:
        return dict(boot_lo=NAN, boot_hi=NAN, p_better_lo=NAN, p_better_hi=NAN)
    rng = np.random.default_rng(seed)
    xb = x[rng.integers(0, x.size, size=(n_boot, x.size))]
    yb = y[rng.integers(0, y.size, size=(n_boot, y.size))]
    lo, hi = _percentiles(xb.mean(axis=1) - yb.mean(axis=1), confidence)
    p_lo, p_hi = _percentiles(_score(xb[:, :, None], yb[:, None, :], lower).mean(axis=(1, 2)), confidence)
    return dict(boot_lo=lo, boot_hi=hi, p_better_lo=p_lo, p_better_hi=p_hi)


# ----------------------------------------------------------------------------------------------
# power


def min_detectable_difference(
    se: float, df: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER
) -> float:
    """(t_{1-alpha/2, df} + t_{power, df}) x se: the smallest true difference a two-sided t test
    at `alpha` detects with probability `power` (paired: se = sd_diff / sqrt(n), df = n - 1)."""
    if not (np.isfinite(se) and np.isfinite(df) and df > 0):
        return NAN
    return (t_quantile(1 - alpha / 2, float(df)) + t_quantile(power, float(df))) * float(se)


def seeds_needed(
    sd: float,
    difference: float,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    cap: int = SEED_CAP,
    unpaired: bool = False,
) -> float:
    """The smallest number of seeds n >= 2 whose minimum detectable difference, at spread `sd`,
    is at most |difference|: paired, sd is the per-seed differences' (se = sd / sqrt(n), df = n - 1);
    unpaired, sd**2 is the sum of the arms' variances and n is per arm (se = sd / sqrt(n),
    df = 2n - 2). inf above `cap`; NaN when sd or the difference is undefined or 0."""
    if not (np.isfinite(sd) and np.isfinite(difference)) or difference == 0:
        return NAN
    n, factor = _mde_factors(alpha, power, cap, unpaired)
    ok = np.flatnonzero(factor * sd <= abs(difference))
    return float(n[ok[0]]) if ok.size else float("inf")


@lru_cache(maxsize=16)
def _mde_factors(alpha: float, power: float, cap: int, unpaired: bool) -> tuple[np.ndarray, np.ndarray]:
    """(n, (t_{1-alpha/2, df} + t_{power, df}) / sqrt(n)) for n = 2..cap: the mde per unit of sd."""
    n = np.arange(2, cap + 1)
    df = 2 * n - 2 if unpaired else n - 1
    return n, (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) / np.sqrt(n)


# ----------------------------------------------------------------------------------------------
# tests for a card of several claims: p-values, Holm's adjustment, equivalence (TOST)


def t_pvalue(diff: float, se: float, df: float) -> float:
    """Two-sided p-value of a t test of diff = 0 (se 0: 0 for a nonzero diff, 1 for 0; NaN undefined)."""
    if not (np.isfinite(diff) and np.isfinite(se) and np.isfinite(df) and df > 0):
        return NAN
    if se == 0:
        return 0.0 if diff != 0 else 1.0
    return float(2 * stats.t.sf(abs(diff) / se, df))


def tost_pvalue(diff: float, se: float, df: float, margin: float) -> float:
    """Two one-sided t tests of equivalence within +-margin: the larger of the p-values of
    H0: diff <= -margin and H0: diff >= margin. Below alpha: the difference lies inside the margin."""
    if not (np.isfinite(diff) and np.isfinite(se) and np.isfinite(df) and df > 0 and margin > 0):
        return NAN
    if se == 0:
        return 0.0 if abs(diff) < margin else 1.0
    lower = stats.t.sf((diff + margin) / se, df)  # H0: diff <= -margin
    upper = stats.t.cdf((diff - margin) / se, df)  # H0: diff >= margin
    return float(max(lower, upper))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and does not count as a test):
    sorted ascending, p_(i) x (m - i + 1), made monotone, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, NAN)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    running = 0.0
    for rank, i in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()
