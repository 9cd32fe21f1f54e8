"""Paired comparisons between arms, seed by seed, and how small a difference the run can resolve.

Why paired. The arms of one seed start from the same SFT policy, so much of a seed's luck is
shared by its arms; the comparison that uses this is the per-seed difference X - Y over the seeds
present in both arms. Resampling each arm's seeds on its own (as rliable's intervals in
`analysis.metrics.nonstationary` do) throws that pairing away and blurs a consistent difference.

Per pair of arms (X, Y) (in the run's arm order, X first), metric and task (`paired_table`; a task
is a switch or a segment; "all" is each seed's mean over the tasks, segments after switches
only, seeds with a value in all of them), `compare` gives:

  pairing           "paired" when the arms share seeds (the same run and at least two seeds with a
                    value in both), else "unpaired" (arms of different runs, disjoint seed lists).
  n, n_x, n_y       seeds compared (paired: the shared ones; unpaired: the smaller arm's count);
                    seeds with a value in X, in Y.
  mean_x, mean_y    the arms' means over the seeds compared.
  diff              mean_x - mean_y (paired: the mean of the per-seed differences).
  diff_lo, diff_hi  the interval that decides the verdict: the paired Student-t interval on the
                    differences, diff +- t_{(1+c)/2, n-1} sd_diff / sqrt(n) (unpaired: Welch's).
                    Why t: with five seeds a percentile bootstrap of a mean under-covers: its
                    spread is the plug-in sd (a factor sqrt((n-1)/n) small) times a normal
                    quantile (1.96 where t_{0.975,4} = 2.78), so a nominal 95% covers ~85%.
  boot_lo, boot_hi  the percentile bootstrap interval of diff, for comparison: paired, ONE
                    resample of seeds applied to both arms (unpaired: each arm its own).
  p_better          P(X better): paired, the share of seeds where X is better than Y (ties count
                    half); unpaired, the same over all pairs of a seed of X and one of Y;
                    `p_better_lo`, `p_better_hi` from the same bootstrap resamples.
  better            "lower" (episodes, judge calls, regret: `nonstationary.LOWER_IS_BETTER`) or
                    "higher" (rewards, shares).
  resolved, verdict the decisive interval excludes 0: "<X> better" or "<Y> better"; else "not
                    resolved". Differences that are all equal give a zero-width interval: the
                    verdict is then the sign (none if 0).
  both_censored     seeds where, in a task of the row, neither arm reached the event (the bar, the
                    own plateau) and their censoring times differ. Each such value is its arm's
                    follow-up, and follow-ups differ by where each arm met the switch (a schedule in
                    simulated seconds) or by what a follow-up counts (judge calls), not by
                    realignment: the row keeps its interval but gets no verdict ("none: ...").
                    Equal censoring times (a schedule in episodes) are a tie, and stay in.
  sd_diff, se_diff  the sd of the per-seed differences (paired; NaN unpaired) and the standard
                    error of diff.
  mde               the smallest difference the run resolves: the minimum detectable difference
                    at 80% power and two-sided alpha 0.05, (t_{0.975,n-1} + t_{0.80,n-1}) sd_diff /
                    sqrt(n) (unpaired: the Welch standard error and degrees of freedom).
  seeds_10pct, seeds_20pct  the seeds a difference of 10% (20%) of |mean_y| would need: the
                    smallest n whose mde, at the observed sd, is at most that difference
                    (unpaired: seeds per arm); inf: more than SEED_CAP; NaN: undefined.

Pure functions of arrays and DataFrames; the statistics themselves (intervals, bootstrap, power) are
analysis.stats.tests'.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics.nonstationary import LOWER_IS_BETTER, POOLED, poolable
from analysis.stats.tests import (  # the statistics, importable from here as before
    DEFAULT_ALPHA,
    DEFAULT_CONFIDENCE,
    DEFAULT_N_BOOT,
    DEFAULT_POWER,
    SEED_CAP,  # noqa: F401
    Values,  # noqa: F401
    min_detectable_difference,
    p_better,
    paired_bootstrap,
    paired_t_interval,
    seeds_needed,
    t_interval,  # noqa: F401
    t_quantile,  # noqa: F401
    unpaired_bootstrap,
    welch_interval,
    welch_se_df,
)

PAIRED, UNPAIRED = "paired", "unpaired"
# the metrics `paired_table` compares by default, per unit
PAIRED_METRICS: dict[str, list[str]] = {
    "switch": ["episodes_to_bar", "judge_calls_to_bar", "auc_after", "dip", "episodes_to_own_plateau"],
    "segment": ["dynamic_regret", "auc"],
}
PAIRED_COLUMNS = [
    "metric",
    "better",
    "unit",
    "task",
    "tasks",
    "arm_x",
    "arm_y",
    "pairing",
    "n",
    "n_x",
    "n_y",
    "mean_x",
    "mean_y",
    "diff",
    "diff_lo",
    "diff_hi",
    "boot_lo",
    "boot_hi",
    "p_better",
    "p_better_lo",
    "p_better_hi",
    "sd_diff",
    "se_diff",
    "mde",
    "seeds_10pct",
    "seeds_20pct",
    "resolved",
    "verdict",
    "both_censored",
]
NAN = float("nan")
# times to an event, censored where it did not happen: the rows whose value is a censoring time
CENSORED_BY: dict[str, tuple[str, object]] = {
    "episodes_to_bar": ("censored", True),
    "judge_calls_to_bar": ("censored", True),
    "seconds_to_bar": ("censored", True),
    "episodes_to_own_plateau": ("status", "not recovered"),
    "judge_calls_to_own_plateau": ("status", "not recovered"),
    "old_half_life": ("old_half_life_censored", True),
    "crossover": ("crossover_censored", True),
    "old_fall": ("old_fall_censored", True),
}


# ----------------------------------------------------------------------------------------------
# one comparison


def verdict(lo: float, hi: float, lower: bool, arm_x: str, arm_y: str) -> str:
    """'<X> better', '<Y> better' (the interval of X - Y excludes 0) or 'not resolved'."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo <= 0 <= hi:
        return "not resolved"
    x_lower = hi < 0
    return f"{arm_x if x_lower == lower else arm_y} better"


def _finite(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, values) of a seed-indexed series where the value is finite."""
    v = s.to_numpy(dtype=float)
    keep = np.isfinite(v)
    return s.index.to_numpy()[keep], v[keep]


def _aligned(x: pd.Series, y: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, y on the seeds both have, in seed order; all of x's values; all of y's values)."""
    sx, vx = _finite(x)
    sy, vy = _finite(y)
    _, ix, iy = np.intersect1d(sx, sy, return_indices=True)
    return vx[ix], vy[iy], vx, vy


def compare(
    x: pd.Series,
    y: pd.Series,
    metric: str,
    arm_x: str = "x",
    arm_y: str = "y",
    paired: bool | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
) -> dict:
    """Arm X against arm Y on one metric and task: the columns of PAIRED_COLUMNS from `pairing` on
    (see the module docstring). `x`, `y`: the arms' values indexed by seed. `paired=None` (or True)
    pairs when they share at least two seeds with values; False never pairs (arms of different
    runs). The bootstrap draws from numpy's Generator seeded with `seed`."""
    lower = metric in LOWER_IS_BETTER
    px, py, fx, fy = _aligned(x, y)
    is_paired = px.size >= 2 and paired is not False
    if is_paired:
        xs, ys = px, py
        d = xs - ys
        n, sd = d.size, float(d.std(ddof=1))
        diff, lo, hi = paired_t_interval(d, confidence)
        se, df = sd / np.sqrt(n), n - 1
        boot = paired_bootstrap(xs, ys, lower, confidence, n_boot, seed)
        spread = sd
    else:
        xs, ys = fx, fy
        n, sd = min(xs.size, ys.size), NAN
        diff, lo, hi = welch_interval(xs, ys, confidence)
        se, df = welch_se_df(xs, ys)
        boot = unpaired_bootstrap(xs, ys, lower, confidence, n_boot, seed)
        spread = float(np.sqrt(xs.var(ddof=1) + ys.var(ddof=1))) if min(xs.size, ys.size) >= 2 else NAN
    mean_y = float(ys.mean()) if ys.size else NAN
    name = verdict(lo, hi, lower, arm_x, arm_y)
    return {
        "pairing": PAIRED if is_paired else UNPAIRED,
        "n": int(n),
        "n_x": int(fx.size),
        "n_y": int(fy.size),
        "mean_x": float(xs.mean()) if xs.size else NAN,
        "mean_y": mean_y,
        "diff": diff,
        "diff_lo": lo,
        "diff_hi": hi,
        **boot,
        "p_better": p_better(xs, ys, lower, paired=is_paired),
        "sd_diff": sd,
        "se_diff": float(se),
        "mde": min_detectable_difference(se, df, alpha, power),
        "seeds_10pct": seeds_needed(spread, 0.1 * abs(mean_y), alpha, power, unpaired=not is_paired),
        "seeds_20pct": seeds_needed(spread, 0.2 * abs(mean_y), alpha, power, unpaired=not is_paired),
        "resolved": name != "not resolved",
        "verdict": name,
    }


# ----------------------------------------------------------------------------------------------
# every pair, metric and task of a per-seed table


def _task_values(table: pd.DataFrame, arm, metric: str, unit: str, tasks: list) -> pd.Series:
    """Per seed: the arm's value of `metric` in the one task, or its mean over several tasks
    (seeds with a value in every one of them)."""
    g = table[(table["arm"] == arm) & table[unit].isin(tasks)]
    wide = g.pivot_table(index="seed", columns=unit, values=metric, aggfunc="mean", dropna=False)
    wide = wide.reindex(columns=tasks)
    return wide.mean(axis=1).where(np.isfinite(wide.to_numpy(float)).all(axis=1))


def both_censored_apart(table: pd.DataFrame, metric: str, unit: str, x, y, tasks: list) -> int:
    """Seeds where, in one of `tasks`, both arms' `metric` is a censoring time and the two differ."""
    column, flag = CENSORED_BY.get(metric, (None, None))
    if column is None or column not in table:
        return 0
    rows = table[table[unit].isin(tasks)]
    censored = rows[rows[column] == flag].set_index(["arm", "seed", unit])[metric]
    if censored.index.has_duplicates:
        censored = censored[~censored.index.duplicated()]
    seeds = set()
    for (arm, seed, task), value in censored.items():
        if arm == x and (y, seed, task) in censored.index and censored[(y, seed, task)] != value:
            seeds.add(seed)
    return len(seeds)


def paired_table(
    table: pd.DataFrame,
    metrics: Sequence[str] | None,
    unit: str,
    arms: Sequence | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """Every pair of `arms` (default: in the table's order; X before Y), metric (default
    PAIRED_METRICS[unit]) and task of a per-seed table (columns arm, seed, `unit` and the
    metrics; `run` optional: arms of different runs are compared unpaired): columns
    PAIRED_COLUMNS. A pooled row "all" per metric when there are several poolable tasks."""
    if table is None or table.empty or unit not in table:
        return pd.DataFrame(columns=PAIRED_COLUMNS)
    metrics = [m for m in (PAIRED_METRICS.get(unit, []) if metrics is None else metrics) if m in table]
    present = list(dict.fromkeys(table["arm"]))
    arms = [a for a in (present if arms is None else arms) if a in present]
    run_of = table.groupby("arm", sort=False)["run"].first().to_dict() if "run" in table else {}
    tasks = sorted(table[unit].dropna().unique())
    groups = [(t, [t]) for t in tasks]
    pooled = poolable(unit, tasks)
    if len(tasks) > 1 and pooled:
        groups.append((POOLED, pooled))
    rows = []
    for metric in metrics:
        for label, group in groups:
            values = {arm: _task_values(table, arm, metric, unit, group) for arm in arms}
            for i, x in enumerate(arms):
                for y in arms[i + 1 :]:
                    same_run = run_of.get(x) == run_of.get(y)
                    row = compare(
                        values[x],
                        values[y],
                        metric,
                        str(x),
                        str(y),
                        paired=None if same_run else False,
                        confidence=confidence,
                        n_boot=n_boot,
                        seed=seed,
                    )
                    blind = both_censored_apart(table, metric, unit, x, y, group) if same_run else 0
                    if blind:
                        row.update(resolved=False, verdict=f"none: neither reached the bar in {blind} seeds")
                    rows.append(
                        {
                            "metric": metric,
                            "better": "lower" if metric in LOWER_IS_BETTER else "higher",
                            "unit": unit,
                            "task": label,
                            "tasks": " ".join(str(t) for t in group),
                            "arm_x": x,
                            "arm_y": y,
                            **row,
                            "both_censored": blind,
                        }
                    )
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)
