"""Metrics from the non-stationary RL literature: reward area and dynamic regret per segment, how
fast the old style fades per switch, and rliable's interval estimates and probability of
improvement across arms.

Pure functions of plain DataFrames (the run directory's tables, as in `analysis.metrics.realign`); nothing
imports the training code. rliable (and arch, its bootstrap) is imported on first use only.

A **segment** is the stretch of the drift clock between two switch points, or the start or end of
the run (`realign.phase_bounds`): segment 0 is [0, T1), segment k is [Tk, Tk+1), the last one ends
at the budget. Only judged episodes count (a failed judge call is a gap, not a zero reward), so
the segment's length n below is its number of judged episodes (end - start in a complete run).

Per arm, seed and segment (`segment_metrics`), with `window` as in `realign.auto_window`:

  auc             the area under the reward curve over the segment divided by its length: the
                  mean reward of the segment's n judged episodes.
  plateau         the seed's plateau: the mean reward of its last `window` judged episodes of the
                  segment (all of them if the segment has fewer).
  best_plateau    the highest plateau that any arm reached in the segment, where an arm's plateau
                  is the mean over its seeds of their plateaus; `best_arm` is that arm.
  reference_reward  what the regret is measured against (`regret_against` says which):
                  "reference": the run's `reference` table, the mean reward of the seed's starting
                  SFT policy prompted with the segment's target only (`recovery.reference_rewards`;
                  independent of the arms compared, so adding or dropping an arm changes nothing);
                  "best arm": without one (older runs), best_plateau, shared by all arms of one
                  call so regret stays comparable across them, but it moves with the arms compared.
                  Either way a seed that beat it for the whole segment has a negative regret.
  regret          the sum over the n judged episodes of (reference_reward - reward).
  dynamic_regret  regret / n = reference_reward - auc: the regret per episode.

Segment 0 is initial learning, not realignment: it keeps its own rows, but the pooled "all" rows of
the segment metrics pool the segments after switches only.

Per arm, seed and switch at clock T from style O to style N, before the next switch (`old_fall`):

  old_fall        episodes after T until O's held-out share (evaluations) first falls to
                  `old_level` (default 0.1, an absolute share) or below, linear between
                  evaluations as `realign`'s old_half_life (the last evaluation at or before T
                  stands for the policy at T); 0 if it is already there at T; NaN if it never
                  gets there before the next switch, or no evaluation precedes T.

The worst-case dip after a switch is realign's `dip` (the lowest rolling reward).

Intervals (`interval_estimates`): per arm, metric and task, rliable's mean and interquartile mean
(IQM: the mean of the middle 50% of values; scipy trims int(n / 4) values from each end, so with
fewer than four values it equals the mean) with stratified-bootstrap percentile 95% intervals
(`rly.get_interval_estimates`). A task is one switch (metrics per switch) or one segment (metrics
per segment); a row "all" pools the tasks when there are several (segments after switches only).
Missing values (a seed without data): per task the seeds without a value are dropped and `n`
counts the rest; one value gives a point and no interval (NaN bounds). rliable needs a full seeds
x tasks matrix, so a pooled row uses only the tasks where every seed of every arm has a value
(listed in `tasks`; none: NaN). Episodes to the bar are censored, never missing for a seed with
data (`analysis.metrics.recovery`): a seed that failed to reach the bar is not dropped.

Probability of improvement (`probability_of_improvement`): for every ordered pair of arms (X, Y),
P(X better than Y) = P(x > y) + P(x = y) / 2 for a random seed x of X and y of Y, averaged over
the tasks (rliable's `metrics.probability_of_improvement`, a Mann-Whitney U statistic), with a
bootstrap interval that resamples each arm's seeds independently within each task. "Better" is
lower for the metrics in LOWER_IS_BETTER (episodes, regret: the scores are negated), higher
otherwise; the `better` column says which. Identical values give 0.5, and P(Y better than X) =
1 - P(X better than Y). The arms' seeds are compared as if independent; `analysis.stats.paired` compares
them seed by seed (the arms of a seed share its SFT policy).

The bootstrap is rliable's (`rly.get_interval_estimates`, `reps` resamples, percentile
intervals), run once per metric and task for all arms together (each arm's seeds resampled on
their own, as in separate runs). The points are rliable's functions; inside the bootstrap their
vectorised twins (`iqm`, `improvement_matrix`) stand in, because scipy's versions cost 0.1-0.5 ms
a call and a report compares up to a dozen arms; tests check that the twins agree.

Reproducible: rliable draws its resamples from numpy's global random generator (whatever
random_state it is given), so each bootstrap seeds it with `seed` and restores its state after.
Not thread-safe for code that shares the global generator meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.metrics import realign
from analysis.metrics.old_fall import DEFAULT_OLD_LEVEL, FALL_COLUMNS, fall_time, old_fall  # noqa: F401  (kept importable here)
from analysis.stats.bootstrap import stratified_bootstrap

DEFAULT_CONFIDENCE = realign.DEFAULT_CONFIDENCE
# Bootstrap resamples per estimate. The report runs after every training run (a dozen arms take
# ~7 s on two cores); with a handful of seeds the resampled statistic takes few distinct values,
# so 1000 resolve a 95% interval.
DEFAULT_REPS = 1000
DEFAULT_SEED = 0
POOLED = "all"

# The metrics that `interval_estimates` covers, by the table they come from (name -> what a
# reader sees); the switch ones are columns of `realign.switch_metrics` (old_fall merged in).
SEGMENT_METRICS: dict[str, str] = {"auc": "reward area", "dynamic_regret": "dynamic regret"}
SWITCH_METRICS: dict[str, str] = {
    "episodes_to_bar": "episodes to the bar",
    "dip": "dip",
    "old_fall": "old share to level",
}
LOWER_IS_BETTER = frozenset(
    {
        "episodes_to_bar",
        "seconds_to_bar",
        "judge_calls_to_bar",
        "episodes_to_own_plateau",
        "judge_calls_to_own_plateau",
        "old_half_life",
        "crossover",
        "old_fall",
        "regret",
        "dynamic_regret",
    }
)
# The probability of improvement costs far more than an interval: the report draws it for these.
IMPROVEMENT_METRICS: dict[str, str] = {"switch": "episodes_to_bar", "segment": "dynamic_regret"}
INTERVAL_COLUMNS = [
    "arm",
    "metric",
    "better",
    "unit",
    "task",
    "tasks",
    "n",
    "mean",
    "mean_lo",
    "mean_hi",
    "iqm",
    "iqm_lo",
    "iqm_hi",
]
IMPROVEMENT_COLUMNS = [
    "metric",
    "better",
    "unit",
    "task",
    "tasks",
    "arm_x",
    "arm_y",
    "n_x",
    "n_y",
    "p_improvement",
    "p_improvement_lo",
    "p_improvement_hi",
]


def better(metric: str) -> str:
    """'lower' or 'higher': which values of `metric` are the better ones."""
    return "lower" if metric in LOWER_IS_BETTER else "higher"


def over_label(unit: str, task, tasks: str) -> str:
    """What a row of `interval_estimates` or `probability_of_improvement` is over: 'switch 1',
    'switches 1 2' (pooled), 'switch 1 only' (the one complete task of several), 'no complete
    switch' (nothing to pool)."""
    if str(task) != POOLED:
        return f"{unit} {task}"
    if not tasks:
        return f"no complete {unit}"
    if " " not in tasks:
        return f"{unit} {tasks} only"
    plural = {"switch": "switches", "segment": "segments"}.get(unit, unit)
    return f"{plural} {tasks}"


# ----------------------------------------------------------------------------------------------
# per segment: in their own module, re-exported here

# ----------------------------------------------------------------------------------------------
# rliable
from analysis.metrics.segments import BEST_ARM, REFERENCE, SEGMENT_COLUMNS, segment_metrics  # noqa: E402,F401
from analysis.stats.rliable_compat import _rliable, seeded_global_rng  # noqa: E402,F401  (kept importable here)


def _seed_task_matrix(table: pd.DataFrame, arm, metric: str, unit: str, tasks: list) -> pd.DataFrame:
    """seeds x tasks: the arm's values of `metric` (NaN where a seed has none)."""
    g = table[table["arm"] == arm]
    return g.groupby(["seed", unit], sort=True)[metric].mean().unstack(unit).reindex(columns=tasks)


def complete_tasks(table: pd.DataFrame, metric: str, unit: str) -> list:
    """The tasks (values of `unit`) where every seed of every arm in the table has a value of
    `metric`: the ones rliable can pool."""
    tasks = sorted(table[unit].dropna().unique())
    out = []
    for task in tasks:
        rows = table[table[unit] == task]
        if not rows.empty and np.isfinite(rows[metric].to_numpy(float)).all():
            out.append(task)
    return out


def poolable(unit: str, tasks: Sequence) -> list:
    """The tasks a pooled row may use: every switch; every segment but 0 (initial learning)."""
    return [t for t in tasks if not (unit == "segment" and t == 0)]


def _task_groups(table: pd.DataFrame, metric: str, unit: str) -> list[tuple[object, list]]:
    """(label, tasks): each task on its own, then the complete poolable tasks pooled when there
    are several tasks."""
    tasks = sorted(table[unit].dropna().unique())
    groups = [(task, [task]) for task in tasks]
    if len(tasks) > 1:
        groups.append((POOLED, poolable(unit, complete_tasks(table, metric, unit))))
    return groups


def _scores(table: pd.DataFrame, arm, metric: str, unit: str, tasks: list) -> np.ndarray:
    """seeds x tasks, finite: one task keeps its seeds with a value; several (a pooled group,
    complete by construction) keep every seed."""
    m = _seed_task_matrix(table, arm, metric, unit, tasks).to_numpy(float)
    return m[np.isfinite(m).all(axis=1)] if m.size else m.reshape(0, len(tasks))


# rliable's statistics and their vectorised twins: the points are rliable's own functions; the
# bootstrap calls a twin thousands of times (scipy's Mann-Whitney test costs ~0.5 ms a task, its
# trimmed mean ~0.1 ms; the twins a few us), and tests/test_nonstationary.py checks that they agree.


def iqm(scores: np.ndarray) -> float:
    """`metrics.aggregate_iqm`: scipy's trim_mean(scores, 0.25, axis=None), int(n / 4) cut per end."""
    a = np.sort(np.asarray(scores, dtype=float), axis=None)
    cut = int(0.25 * a.size)
    return float(a[cut : a.size - cut].mean())


def improvement_matrix(*scores: np.ndarray) -> np.ndarray:
    """P[i, j] = `metrics.probability_of_improvement(scores[i], scores[j])` for every pair of
    seeds x tasks matrices (any numbers of seeds, the same tasks): per task P(x > y) + P(x = y) / 2
    over all pairs of seeds, averaged over the tasks; 0.5 on the diagonal."""
    k, n = len(scores), max(s.shape[0] for s in scores)
    padded = np.full((k, n, scores[0].shape[1]), np.nan)  # NaN pads compare as neither > nor =
    for i, s in enumerate(scores):
        padded[i, : s.shape[0]] = s
    d = padded[:, None, :, None, :] - padded[None, :, None, :, :]  # arm, arm, seed, seed, task
    pairs = np.array([s.shape[0] for s in scores], dtype=float)
    per_task = ((d > 0).sum(axis=(2, 3)) + 0.5 * (d == 0).sum(axis=(2, 3))) / np.outer(pairs, pairs)[:, :, None]
    return per_task.mean(axis=2)


def _mean_and_iqm(*scores: np.ndarray) -> np.ndarray:
    return np.array([v for s in scores for v in (s.mean(axis=0).mean(), iqm(s))])


def _off_diagonal(*scores: np.ndarray) -> np.ndarray:
    m = improvement_matrix(*scores)
    return m[~np.eye(len(scores), dtype=bool)]


def _task_scores(table: pd.DataFrame, metrics: Sequence[str], unit: str, arms: list):
    """(metric, task label, tasks, {arm: seeds x tasks matrix}) for every metric the table has and
    every task group (`_task_groups`)."""
    for metric in metrics:
        if metric not in table:
            continue
        for label, tasks in _task_groups(table, metric, unit):
            yield (
                metric,
                label,
                tasks,
                {arm: _scores(table, arm, metric, unit, tasks) if tasks else np.zeros((0, 0)) for arm in arms},
            )


def interval_estimates(
    table: pd.DataFrame,
    metrics: Sequence[str],
    unit: str,
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """Per arm, metric and task: mean and IQM over seeds with rliable's stratified-bootstrap
    intervals (columns `INTERVAL_COLUMNS`). `table` is per arm, seed and task, the task in column
    `unit` ("switch" or "segment"); see the module docstring for the pooled "all" rows and NaNs."""
    if table is None or table.empty or unit not in table:
        return pd.DataFrame(columns=INTERVAL_COLUMNS)
    _, rl_metrics = _rliable()
    arms = sorted(table["arm"].unique(), key=str)
    rows = []
    for metric, label, tasks, scores in _task_scores(table, metrics, unit, arms):
        # the arms with two seeds or more, bootstrapped together (one seed: nothing to resample)
        spread = [arm for arm in arms if scores[arm].shape[0] >= 2]
        bounds = {}
        if spread:
            lo, hi = stratified_bootstrap([scores[a] for a in spread], _mean_and_iqm, reps, confidence, seed)
            bounds = {a: (lo[2 * i : 2 * i + 2], hi[2 * i : 2 * i + 2]) for i, a in enumerate(spread)}
        for arm in arms:
            s = scores[arm]
            mean = float(rl_metrics.aggregate_mean(s)) if s.shape[0] else np.nan
            center = float(rl_metrics.aggregate_iqm(s)) if s.shape[0] else np.nan
            lo, hi = bounds.get(arm, (np.full(2, np.nan), np.full(2, np.nan)))
            rows.append(
                {
                    "arm": arm,
                    "metric": metric,
                    "better": better(metric),
                    "unit": unit,
                    "task": label,
                    "tasks": " ".join(str(t) for t in tasks),
                    "n": int(s.shape[0]),
                    "mean": mean,
                    "mean_lo": float(lo[0]),
                    "mean_hi": float(hi[0]),
                    "iqm": center,
                    "iqm_lo": float(lo[1]),
                    "iqm_hi": float(hi[1]),
                }
            )
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)


def probability_of_improvement(
    table: pd.DataFrame,
    metrics: Sequence[str],
    unit: str,
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> pd.DataFrame:
    """For every ordered pair of arms (X, Y), metric and task: P(X better than Y) with rliable's
    bootstrap interval (columns `IMPROVEMENT_COLUMNS`; "better" is lower for LOWER_IS_BETTER).
    Tasks, pooling and NaNs as in `interval_estimates`; no interval unless both arms have two
    seeds. The point is rliable's `metrics.probability_of_improvement` for each unordered pair
    (P(Y over X) = 1 - P(X over Y)); all arms are resampled in one bootstrap."""
    if table is None or table.empty or unit not in table:
        return pd.DataFrame(columns=IMPROVEMENT_COLUMNS)
    _, rl_metrics = _rliable()
    arms = sorted(table["arm"].unique(), key=str)
    rows = []
    for metric, label, tasks, scores in _task_scores(table, metrics, unit, arms):
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0  # rliable counts higher scores as better
        scores = {arm: sign * m for arm, m in scores.items()}
        spread = [arm for arm in arms if scores[arm].shape[0] >= 2]
        bounds = {}
        if len(spread) >= 2:
            lo, hi = stratified_bootstrap([scores[a] for a in spread], _off_diagonal, reps, confidence, seed)
            pairs = [(x, y) for x in spread for y in spread if x != y]  # _off_diagonal's order
            bounds = {pair: (float(lo[i]), float(hi[i])) for i, pair in enumerate(pairs)}
        points = {}
        for i, x in enumerate(arms):
            for y in arms[i + 1 :]:
                p = np.nan
                if scores[x].shape[0] and scores[y].shape[0]:
                    p = float(rl_metrics.probability_of_improvement(scores[x], scores[y]))
                points[x, y], points[y, x] = p, 1.0 - p
        for (x, y), p in points.items():
            lo, hi = bounds.get((x, y), (np.nan, np.nan))
            rows.append(
                {
                    "metric": metric,
                    "better": better(metric),
                    "unit": unit,
                    "task": label,
                    "tasks": " ".join(str(t) for t in tasks),
                    "arm_x": x,
                    "arm_y": y,
                    "n_x": int(scores[x].shape[0]),
                    "n_y": int(scores[y].shape[0]),
                    "p_improvement": p,
                    "p_improvement_lo": lo,
                    "p_improvement_hi": hi,
                }
            )
    return pd.DataFrame(rows, columns=IMPROVEMENT_COLUMNS)
