"""Recovery on a common bar, with censoring: the building blocks of `realign.switch_metrics`'
primary metric and of its per-arm summary.

Why a common bar. Grading each seed against its own pre-switch plateau gives an arm with a lower
plateau an easier bar. Every arm of one seed starts from the same SFT policy, so the bar is one
number per seed and switch, the same for every arm (`common_bars`):

  reference     `fraction` x the reference reward of the new phase for that seed: the mean reward,
                on held-out prompts, of the seed's starting SFT policy whose prompt offers only the
                new target style (the run's `reference` table; its rows for one seed are identical
                across arms, so the mean over arms is taken: `reference_rewards`).
  best plateau  without a reference table (older runs): `fraction` x the best pre-switch plateau
                over all arms of that seed (the plateau is the mean reward of the `window` judged
                episodes before the switch).

A source under MIN_PLATEAU (0.1) gives no bar (NaN): a fraction of ~0 is reached by anything.

Why censoring. A seed that never reaches the bar before the phase ends has not "no value": it took
longer than its follow-up (the episodes it was observed after the switch: the phase length,
next switch - T or budget - T, in any complete run). It is kept at that follow-up and flagged
`censored`, never dropped. Per arm and switch (`bar_summary`): reached k/n, and the Kaplan-Meier
median with its interval (`km_median`); the restricted mean (censored seeds at their censoring
time) is `realign_summary.aggregate`'s mean of `episodes_to_bar`.

Pure functions of DataFrames and arrays; scipy's `stats.ecdf` on `stats.CensoredData` for the
Kaplan-Meier estimate.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

MIN_PLATEAU = 0.1  # below this a "recovery" to a fraction of it is trivial
REFERENCE, BEST_PLATEAU, NO_BAR = "reference", "best plateau", "none"
REFERENCE_COLUMNS = ["seed", "phase", "reference_reward"]

# The switch points of a run: one list for every arm and seed (a schedule in episodes), or one per
# (arm, seed) (a schedule in simulated seconds: each arm x seed meets a switch at its own episode).
Switches: TypeAlias = Sequence[int] | Mapping[tuple[Any, int], Sequence[int]]


def switches_for(switch_points: Switches, arm: Any, seed: int) -> list[int]:
    """The switch points of one arm x seed (none where a per-pair mapping lacks it)."""
    if isinstance(switch_points, Mapping):
        return [int(s) for s in switch_points.get((arm, int(seed)), [])]
    return [int(s) for s in switch_points]


def switch_count(switch_points: Switches) -> int:
    """How many switches the run has (the most any arm x seed met)."""
    if isinstance(switch_points, Mapping):
        return max((len(s) for s in switch_points.values()), default=0)
    return len(switch_points)


def reference_rewards(reference: pd.DataFrame | None) -> pd.DataFrame:
    """Per seed and phase (and run, where the table has a `run` column): `reference_reward`, the
    mean over arms of the reference table's `reward` (identical across the arms of one seed).
    Empty (columns REFERENCE_COLUMNS) when there is no usable reference table."""
    if reference is None or reference.empty or not {"seed", "phase", "reward"} <= set(reference.columns):
        return pd.DataFrame(columns=REFERENCE_COLUMNS)
    keys = [k for k in ("run", "seed", "phase") if k in reference.columns]
    ref = reference.dropna(subset=["seed", "phase", "reward"])
    out = ref.groupby(keys, sort=True)["reward"].mean().rename("reference_reward").reset_index()
    return out.astype({"phase": int})


def plateau(t: np.ndarray, r: np.ndarray, switch: int, window: int) -> float:
    """The mean reward of the `window` clock values before `switch` (NaN if none was judged)."""
    before = r[(t >= switch - window) & (t < switch)]
    return float(before.mean()) if before.size else float("nan")


def _bar(ref: float, best: float, fraction: float) -> tuple[float, str]:
    if np.isfinite(ref):
        return (fraction * ref, REFERENCE) if ref >= MIN_PLATEAU else (float("nan"), REFERENCE)
    if np.isfinite(best):
        return (fraction * best, BEST_PLATEAU) if best >= MIN_PLATEAU else (float("nan"), BEST_PLATEAU)
    return float("nan"), NO_BAR


def common_bars(
    ok: pd.DataFrame, switch_points: Switches, window: int, fraction: float, reference: pd.DataFrame | None = None
) -> dict[tuple, tuple[float, str]]:
    """{(seed, switch number 1..): (bar, bar_source)} from the judged episodes `ok` of all arms of
    one run (see the module docstring). A seed missing from the reference table falls back to the
    best plateau on its own; `(nan, "none")` where neither is known. Per-pair switch points: each
    arm's plateau is taken before its own switch."""
    ref = reference_rewards(reference).drop(columns="run", errors="ignore")
    ref_at = {(int(s), int(p)): float(v) for s, p, v in ref[REFERENCE_COLUMNS].itertuples(index=False)}
    best: dict[tuple, float] = {}
    if not ok.empty:
        for (arm, seed), g in ok.sort_values("t").groupby(["arm", "seed"], sort=True):
            t, r = g["t"].to_numpy(), g["reward"].to_numpy(float)
            for i, switch in enumerate(switches_for(switch_points, arm, seed)):
                p = plateau(t, r, int(switch), window)
                if np.isfinite(p):
                    best[seed, i + 1] = max(best.get((seed, i + 1), -np.inf), p)
    seeds = set(ok["seed"]) if not ok.empty else set()
    seeds |= {s for s, _ in ref_at}
    return {
        (seed, k): _bar(ref_at.get((int(seed), k), np.nan), best.get((seed, k), np.nan), fraction)
        for seed in seeds
        for k in range(1, switch_count(switch_points) + 1)
    }


def time_to_level(
    after_t: np.ndarray, roll: np.ndarray, level: float, switch: int, follow_up: int, calls
) -> tuple[float, float, bool]:
    """(episodes, judge calls, reached): from the switch to the end of the first full rolling
    window (`roll` finite) at or above `level`; if none, censored at `follow_up` episodes and the
    calls spent in them. `calls(t)` is the cumulative judge calls before clock t."""
    hit = np.flatnonzero(np.isfinite(roll) & (roll >= level - 1e-12))
    if hit.size:
        t_hit = int(after_t[hit[0]])
        return float(t_hit - switch + 1), calls(t_hit + 1) - calls(switch), True
    return float(follow_up), calls(switch + follow_up) - calls(switch), False


# ----------------------------------------------------------------------------------------------
# per arm and switch


def _first_at_or_below(t: np.ndarray, s: np.ndarray, level: float) -> float:
    below = np.flatnonzero(s <= level + 1e-12)
    return float(t[below[0]]) if below.size else float("nan")


def km_median(
    times: Sequence[float] | np.ndarray, censored: Sequence[bool] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Kaplan-Meier median of the times to the bar with right-censoring, and its interval.

    The median is the first time where the survival curve S (share not yet at the bar) is at
    or below 0.5; the interval (Brookmeyer-Crowley, as R's survfit) runs from the first time
    where the lower confidence band (log-log) is at or below 0.5 to the first time where the
    upper band is. NaN median: fewer than half reached the bar within the follow-up; NaN upper
    bound: the upper band never drops to 0.5 (more follow-up needed). No time: all NaN."""
    t = np.asarray(times, dtype=float)
    c = np.asarray(censored, dtype=bool)
    keep = np.isfinite(t)
    t, c = t[keep], c[keep]
    if t.size == 0:
        return float("nan"), float("nan"), float("nan")
    from scipy import stats

    sf = stats.ecdf(stats.CensoredData(uncensored=t[~c], right=t[c])).sf
    q, s = sf.quantiles, sf.probabilities
    with warnings.catch_warnings():  # undefined where S is 0 or 1: the band is the point there
        warnings.simplefilter("ignore", RuntimeWarning)
        band = sf.confidence_interval(confidence, method="log-log")
    low = np.where(np.isfinite(band.low.probabilities), band.low.probabilities, s)
    high = np.where(np.isfinite(band.high.probabilities), band.high.probabilities, s)
    return _first_at_or_below(q, s, 0.5), _first_at_or_below(q, low, 0.5), _first_at_or_below(q, high, 0.5)


def bar_summary(g: pd.DataFrame, confidence: float = 0.95) -> dict:
    """One arm and switch's seeds (rows of `realign.switch_metrics`): `bar` (mean over seeds),
    `bar_source`, `bar_seeds` (seeds with a time to the bar, censored or not), `reached_bar`
    (seeds that reached it), `follow_up` (the longest censoring time: what a censored seed is
    known to exceed) and the Kaplan-Meier `km_median`, `km_median_lo`, `km_median_hi`."""
    times = g["episodes_to_bar"].to_numpy(float) if "episodes_to_bar" in g else np.zeros(0)
    have = np.isfinite(times)
    cens = g["censored"].fillna(False).to_numpy(bool)[have] if "censored" in g else np.zeros(0, bool)
    med, lo, hi = km_median(times[have], cens, confidence)
    sources = sorted(set(g["bar_source"].dropna().astype(str))) if "bar_source" in g else []
    bars = g["bar"].to_numpy(float) if "bar" in g else np.zeros(0)
    return {
        "bar": float(np.nanmean(bars)) if np.isfinite(bars).any() else float("nan"),
        "bar_source": ", ".join(sources),
        "bar_seeds": int(have.sum()),
        "reached_bar": int((~cens).sum()),
        "follow_up": float(times[have].max()) if have.any() else float("nan"),
        "km_median": med,
        "km_median_lo": lo,
        "km_median_hi": hi,
    }
