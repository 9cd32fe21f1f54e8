"""A fixed cycle of styles."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from testbed.envs.schedules.base import ScheduleConfig, check_clock, check_styles, episodes, resolve_candidates
from testbed.registry import configured
from testbed.types import Target


class PeriodicConfig(ScheduleConfig):
    """`schedule: {type: periodic, args: {styles: [...], period: 0.25}}` (period as a fraction of the budget)."""

    styles: list[str] = Field(min_length=2)
    period: float = Field(gt=0.0, le=1.0, description="phase length, fraction of budget")
    candidates: list[str] | None = None


@configured(PeriodicConfig)
def periodic(*, budget: int, archetypes: Sequence[str], **args: Any) -> PeriodicSchedule:
    """The registered `periodic`: its args (the period in a fraction of the budget) -> clocks."""
    config = PeriodicConfig.model_validate(args, context={"budget": budget})
    return PeriodicSchedule(
        config.styles, period=max(1, episodes(config.period, budget)), candidates=config.candidates, horizon=budget
    )


class PeriodicSchedule:
    """Cycles through ``styles`` (in order, wrapping around), ``period`` episodes each.

    ``candidates`` (default: the distinct styles, in order) is the same at every clock.
    ``horizon`` bounds ``switch_points()``/``phases()``, since the cycle never ends; without it
    those two methods need an explicit ``until``.
    """

    def __init__(
        self,
        styles: Sequence[str],
        period: int,
        candidates: Sequence[str] | None = None,
        horizon: int | None = None,
    ) -> None:
        self.styles = check_styles(styles, "PeriodicSchedule")
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError(f"PeriodicSchedule: period must be an int >= 1, got {period!r}")
        self.period = period
        self.candidates = resolve_candidates(self.styles, candidates, "PeriodicSchedule")
        if horizon is not None and (not isinstance(horizon, int) or horizon < 0):
            raise ValueError(f"PeriodicSchedule: horizon must be an int >= 0 or None, got {horizon!r}")
        self.horizon = horizon

    def target(self, t: int) -> Target:
        t = check_clock(t)
        return Target(style=self.styles[(t // self.period) % len(self.styles)], candidates=self.candidates)

    def _until(self, until: int | None) -> int:
        until = self.horizon if until is None else until
        if until is None:
            raise ValueError(
                "PeriodicSchedule cycles forever: pass horizon=<run length> to the constructor "
                "(or until=... here) to list its switch points or phases"
            )
        return until

    def phases(self, until: int | None = None) -> list[tuple[int, int, str]]:
        """Maximal runs of one style (consecutive equal styles merge) up to ``until`` (default: horizon)."""
        until = self._until(until)
        out: list[tuple[int, int, str]] = []
        for start in range(0, until, self.period):
            style = self.target(start).style
            end = min(start + self.period, until)
            if out and out[-1][2] == style:
                out[-1] = (out[-1][0], end, style)
            else:
                out.append((start, end, style))
        return out

    def switch_points(self, until: int | None = None) -> list[int]:
        return [start for start, _, _ in self.phases(until)[1:]]

    def __repr__(self) -> str:
        return f"PeriodicSchedule({self.styles}, period={self.period}, horizon={self.horizon})"
