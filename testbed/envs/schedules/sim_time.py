"""A drift schedule on the simulated clock (`schedule.clock: sim_seconds`, runtime.kind: simulated).

The wrapped schedule is any schedule whose clock is one whole simulated second (built with
`budget = schedule.horizon_s`, so its fractions are fractions of that horizon, or `unit: seconds`).
The env still asks for targets by episode clock `t`; this wrapper answers with the target in force
at the simulated second episode `t` is judged. The simulated runtime tells it the time before it
issues, judges or evaluates anything (`at(now_s, clock)`): the episodes judged from `clock` on are
judged at `now_s`, until the next call. So the switch at hour 3 falls at hour 3 whatever the arm's
throughput, and each arm x seed realises it at its own episode (`switch_points()`).

A judged episode's target never changes afterwards (its clock keeps its time); an episode not yet
judged gets the target in force now (the generation-time target of an episode issued now).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator
from typing import Any

from testbed.envs.schedules.base import check_clock
from testbed.types import Target


class SimTimeSchedule:
    """`inner` (a schedule in whole simulated seconds) seen by episode clock (the module docstring)."""

    clock = "sim_seconds"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.steps_t: list[int] = [0]  # the first episode clock of each stretch judged at one time
        self.steps_s: list[float] = [0.0]  # that stretch's simulated time
        self._pinned: float | None = None
        if callable(getattr(inner, "judge_at", None)):  # a schedule that changes the judge: by the second too
            self.judge_at = lambda t: inner.judge_at(int(self.seconds_of(t)))

    def fresh(self) -> SimTimeSchedule:
        """A copy at time 0: every arm x seed realises the switches on its own clock."""
        return SimTimeSchedule(self.inner)

    def at(self, now_s: float, clock: int) -> None:
        """Episodes judged from `clock` on are judged at `now_s` (until the next call)."""
        if now_s < self.steps_s[-1] or clock < self.steps_t[-1]:
            raise ValueError(
                f"simulated time and clock only move forward: got ({now_s} s, t={clock}) after "
                f"({self.steps_s[-1]} s, t={self.steps_t[-1]})"
            )
        if clock == self.steps_t[-1]:  # nothing judged since the last call: the stretch moves in time
            self.steps_s[-1] = now_s
        else:
            self.steps_t.append(clock)
            self.steps_s.append(now_s)

    def seconds_of(self, t: int) -> float:
        """The simulated time at which episode `t` is (or, if not yet judged, would be now) judged."""
        if self._pinned is not None:
            return self._pinned
        return self.steps_s[bisect.bisect_right(self.steps_t, check_clock(t)) - 1]

    def target(self, t: int) -> Target:
        return self.inner.target(int(self.seconds_of(t)))

    def switch_seconds(self) -> list[int]:
        """The switches in simulated seconds (the wrapped schedule's switch points)."""
        return [int(s) for s in self.inner.switch_points()]

    def switch_points(self) -> list[int]:
        """The realised switches in episodes: for each switch second reached so far, the clock of
        the first episode judged at or after it (none before the run starts)."""
        out = []
        for second in self.switch_seconds():
            i = bisect.bisect_left(self.steps_s, second)
            if i < len(self.steps_s):
                out.append(self.steps_t[i])
        return out

    def phase_starts_s(self) -> list[int]:
        """The second each phase starts: 0, then each switch."""
        return [0, *self.switch_seconds()]

    @contextlib.contextmanager
    def pinned(self, second: float) -> Iterator[None]:
        """Every target is the one in force at `second` inside (the reference policy per phase)."""
        self._pinned = second
        try:
            yield
        finally:
            self._pinned = None

    def state_dict(self) -> dict[str, list]:
        return {"steps_t": list(self.steps_t), "steps_s": list(self.steps_s)}

    def load_state_dict(self, state: dict[str, list]) -> None:
        self.steps_t, self.steps_s = list(state["steps_t"]), list(state["steps_s"])

    def __repr__(self) -> str:
        return f"SimTimeSchedule({self.inner!r})"
