"""Rows of the run's tables, as the points a tracker logs.

Every point belongs to one arm x seed (`key`), sits at the drift clock `t` (`step`: the x-axis
of every curve, so the switch is at the same place in every tracker) and has a place in its
stream (`seq`): the update number, the evaluation's clock, the count of judged episodes. A
stream's `seq` only grows, so a backend that already logged a point knows it by its cursor and
skips it on `--resume`.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from testbed.tracking.config import TrackingConfig

# Columns that say where a row belongs rather than what was measured
UPDATE_KEYS = ("arm", "seed", "t")
Switch = tuple[int, str, str]  # clock, old target, new target
STREAMS = ("schedule", "update", "eval", "rolling")


@dataclass(frozen=True)
class Point:
    key: str
    stream: str
    seq: int
    step: int
    scalars: dict[str, float]
    texts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Opened:
    """The first row of an arm x seed: its tracker run starts here."""

    key: str
    arm: str
    seed: int


def run_key(arm: str, seed: Any) -> str:
    return f"{arm}-seed{int(seed)}"


def number(value: Any) -> float | None:
    """A finite or infinite real as a float; None for what is missing (None, NaN), text and lists."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        as_float = float(value)
        return None if math.isnan(as_float) else as_float
    return None


def schedule_points(key: str, switches: list[Switch]) -> list[Point]:
    """The target's phase as a step function of t, and each switch as a text marker at its clock."""
    points = [Point(key, "schedule", 0, 0, {"schedule/phase": 0.0})]
    for k, (clock, old, new) in enumerate(switches, start=1):
        points.append(Point(key, "schedule", 2 * k - 1, max(clock - 1, 0), {"schedule/phase": float(k - 1)}))
        points.append(
            Point(
                key,
                "schedule",
                2 * k,
                clock,
                {"schedule/phase": float(k)},
                {"schedule/switch": f"switch {k} at t={clock}: {old} -> {new}"},
            )
        )
    return points


class RowMirror:
    """Turns each table's rows into points, keeping the rolling reward of each arm x seed."""

    def __init__(self, config: TrackingConfig, switches: list[Switch]):
        self.window, self.every, self.switches = config.rolling_window, config.rolling_every, switches
        self.rewards: dict[str, deque[float]] = {}
        self.judged: dict[str, int] = {}

    def points(self, table: str, rows: Iterable[dict[str, Any]]) -> list[Point | Opened]:
        if table not in ("updates", "evals", "episodes"):
            return []
        rows = list(rows)
        out: list[Point | Opened] = []
        for arm, seed in dict.fromkeys((row["arm"], int(row["seed"])) for row in rows):
            key = run_key(arm, seed)
            if key not in self.rewards:
                self.rewards[key], self.judged[key] = deque(maxlen=self.window), 0
                out += [Opened(key, arm, seed), *schedule_points(key, self.switches)]
        if table == "updates":
            out += [self.update(row) for row in rows]
        elif table == "evals":
            out += self.evals(rows)
        else:
            out += [point for row in rows if (point := self.episode(row)) is not None]
        return out

    def update(self, row: dict[str, Any]) -> Point:
        scalars = {
            f"train/{name}": value
            for name, raw in row.items()
            if name not in UPDATE_KEYS and (value := number(raw)) is not None
        }
        key = run_key(row["arm"], row["seed"])
        return Point(key, "update", int(row["update"]), int(row["t"]), scalars)

    def evals(self, rows: list[dict[str, Any]]) -> list[Point]:
        """One point per evaluation (its rows are one per style): each style's share, the reward."""
        by_eval: dict[tuple[str, int], dict[str, float]] = {}
        for row in rows:
            scalars = by_eval.setdefault((run_key(row["arm"], row["seed"]), int(row["t"])), {})
            share = number(row.get("share"))
            if share is not None:
                scalars[f"eval/share/{row['style']}"] = share
            for name in ("eval_reward", "eval_quality"):
                value = number(row.get(name))
                if value is not None:
                    scalars[f"eval/{name.removeprefix('eval_')}"] = value
        return [Point(key, "eval", t, t, scalars) for (key, t), scalars in by_eval.items()]

    def episode(self, row: dict[str, Any]) -> Point | None:
        """A judged episode joins its arm x seed's rolling reward; every `rolling_every`-th gives a point."""
        reward = number(row.get("reward"))
        if reward is None:  # a failed judge call: no reward (a gap, never a zero)
            return None
        key = run_key(row["arm"], row["seed"])
        self.rewards[key].append(reward)
        self.judged[key] += 1
        if self.judged[key] % self.every:
            return None
        window, judged = self.rewards[key], self.judged[key]
        # the count too: a resumed W&B run finds its rolling stream's cursor by it (wandb_log.py)
        scalars = {"episodes/reward_rolling": sum(window) / len(window), "episodes/judged": float(judged)}
        return Point(key, "rolling", judged, int(row["t"]), scalars)
