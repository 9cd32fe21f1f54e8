"""Seeded random switch points."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from testbed.envs.schedules.base import Phase, ScheduleConfig, check_styles, episodes, resolve_candidates
from testbed.envs.schedules.piecewise import PiecewiseSchedule
from testbed.registry import configured
from testbed.types import Target


class RandomConfig(ScheduleConfig):
    """`schedule: {type: random, args: {styles: [...], mean_phase: 0.25, min_phase: 0.1, seed: 0}}` (fractions)."""

    styles: list[str] = Field(min_length=2)
    mean_phase: float = Field(0.25, gt=0.0, le=1.0)
    min_phase: float = Field(0.1, gt=0.0, le=1.0)
    candidates: list[str] | None = None
    seed: int = 0


@configured(RandomConfig)
def random_switches(*, budget: int, archetypes: Sequence[str], **args: Any) -> RandomSchedule:
    """The registered `random`: its args (phase lengths in fractions of the budget) -> clocks."""
    config = RandomConfig.model_validate(args, context={"budget": budget})
    return RandomSchedule(
        config.styles,
        mean_phase=max(1, episodes(config.mean_phase, budget)),
        min_phase=max(1, episodes(config.min_phase, budget)),
        horizon=budget,
        seed=config.seed,
        candidates=config.candidates,
    )


class RandomSchedule:
    """Switch points drawn up front from a seeded RNG: phase lengths are
    ``min_phase + round(Exponential(mean = mean_phase - min_phase))`` (so the mean length is about
    ``mean_phase``), the first style is drawn uniformly and each next style uniformly among the
    *other* styles (never the same style twice in a row). Phases are drawn until they cover
    ``horizon``; beyond the last phase the last target holds. Every phase, the last included,
    is at least ``min_phase`` long.
    """

    def __init__(
        self,
        styles: Sequence[str],
        mean_phase: int,
        min_phase: int,
        horizon: int,
        seed: int = 0,
        candidates: Sequence[str] | None = None,
    ) -> None:
        styles = list(dict.fromkeys(check_styles(styles, "RandomSchedule")))
        if len(styles) < 2:
            raise ValueError(f"RandomSchedule needs at least 2 distinct styles to switch between, got {styles}")
        if not isinstance(min_phase, int) or min_phase < 1:
            raise ValueError(f"RandomSchedule: min_phase must be an int >= 1, got {min_phase!r}")
        if mean_phase < min_phase:
            raise ValueError(f"RandomSchedule: mean_phase ({mean_phase}) must be >= min_phase ({min_phase})")
        if not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"RandomSchedule: horizon must be an int >= 1, got {horizon!r}")
        self.styles = styles
        self.mean_phase, self.min_phase, self.horizon, self.seed = mean_phase, min_phase, horizon, seed
        self.candidates = resolve_candidates(styles, candidates, "RandomSchedule")

        rng = random.Random(seed)
        extra_mean = mean_phase - min_phase
        phases: list[Phase] = []
        start = 0
        style = rng.choice(styles)
        while start < horizon:
            extra = 0 if extra_mean == 0 else round(rng.expovariate(1.0 / extra_mean))
            end = start + min_phase + extra
            phases.append(Phase(style, start, end, self.candidates))
            start = end
            style = rng.choice([s for s in styles if s != style])
        self._piecewise = PiecewiseSchedule(phases)

    def target(self, t: int) -> Target:
        return self._piecewise.target(t)

    def switch_points(self) -> list[int]:
        return self._piecewise.switch_points()

    def phases(self) -> list[tuple[int, int, str]]:
        return self._piecewise.phases()

    def __repr__(self) -> str:
        return (
            f"RandomSchedule({self.styles}, mean_phase={self.mean_phase}, min_phase={self.min_phase}, "
            f"horizon={self.horizon}, seed={self.seed})"
        )
