"""Judge drift: a schedule that changes the judge as well as the target.

A deployed judge drifts too: its prompt template or its model is upgraded mid-run, its quality
bar rises as the product matures, or two judges' preferences are blended while one replaces the
other (NS-DPO, arXiv 2407.18676, blends two reward models over time offline; here it happens online).
`judge_drift` wraps any target schedule (`targets: {type, args}`, or one constant `style:`) and
a list of judge changes, each naming one of the scenario's judges ("default" is its `judge`, the
others the keys of its `judges:`):

    judges:
      - {judge: default, start: 0.0}             # the judge in force from the start
      - {judge: v2, start: 0.5}                  # a step: v2 scores every episode from 0.5 on
      - {judge: strict, start: 0.8, window: 0.2} # a blend: over [0.7, 0.9) the chance that a
                                                 # verdict comes from `strict` rises linearly 0 -> 1

Inside a blend's window the judge of clock t is the new one when a seeded hash of (seed, t) falls
under p = (t - lo + 0.5) / window, so `judge_at(t)` is a pure function, as `target(t)` is (the
same draw as the `gradual` schedule's for styles, under its own hash). A switch to another judge,
to another template or strictness of the same judge (another entry of `judges:` with the same
`type` and other `args`) and a bar that rises in steps are all steps; a bar that rises gradually
is a blend from one bar to the next (the expected bar rises linearly over the window).

Every judge change is a switch: `switch_points()` lists it beside the target's switches (a
blend's at the middle of its window, as a gradual target's), so the report measures realignment
after it with the same metrics, the same common bar (the reference policy judged by the new judge,
testbed/runtimes/reference_policy.py) and the same paired comparisons.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, model_validator

from testbed.envs.schedules.base import Phase, ScheduleConfig, StrictArgs, check_clock, episodes
from testbed.envs.schedules.loading import build_schedule
from testbed.envs.schedules.piecewise import PiecewiseSchedule
from testbed.protocols import DEFAULT_JUDGE
from testbed.registry import configured
from testbed.types import Target


class TargetsSpec(StrictArgs):
    """The target schedule inside: `{type: NAME, args: {...}}`, as a scenario's `schedule:` is written."""

    type: str
    args: dict[str, Any] = Field(default_factory=dict)


class JudgeChangeConfig(StrictArgs):
    judge: str = Field(description="'default' (the scenario's judge) or a key of the scenario's judges:")
    start: float = Field(ge=0.0, le=1.0, description="where it takes over, fraction of the budget")
    window: float = Field(0.0, ge=0.0, lt=1.0, description="0: a step; > 0: a blend over this width, centred on start")


class JudgeDriftConfig(ScheduleConfig):
    """`schedule: {type: judge_drift, args: {targets: {...} | style: S, judges: [...], seed: 0}}`."""

    targets: TargetsSpec | None = Field(None, description="the target schedule (any registered schedule)")
    style: str | None = Field(None, description="or one target for the whole run")
    candidates: list[str] | None = Field(None, description="with style: the styles the prompt lists")
    judges: list[JudgeChangeConfig] = Field(min_length=2, description="the judge changes, in order")
    seed: int = Field(0, description="seed of the blends' draws")

    @model_validator(mode="after")
    def _consistent(self) -> JudgeDriftConfig:
        if (self.targets is None) == (self.style is None):
            raise ValueError("give the target as exactly one of `targets: {type, args}` and `style:`")
        if self.candidates is not None and self.style is None:
            raise ValueError("candidates: only with style: (a targets schedule lists its own)")
        if self.style is not None and self.candidates is not None and self.style not in self.candidates:
            raise ValueError(f"style '{self.style}' is not among candidates {self.candidates}")
        first = self.judges[0]
        if first.start != 0.0 or first.window != 0.0:
            raise ValueError("judges.0: the first judge must start at 0.0, with no window")
        for i, (prev, cur) in enumerate(zip(self.judges, self.judges[1:]), start=1):
            if cur.start <= prev.start:
                raise ValueError(f"judges.{i}: starts at {cur.start}, not after judges.{i - 1} ({prev.start})")
            if cur.judge == prev.judge:
                raise ValueError(f"judges.{i}: '{cur.judge}' is the judge already in force: not a change")
        return self


@configured(JudgeDriftConfig)
def judge_drift(*, budget: int, archetypes: Sequence[str], **args: Any) -> JudgeDriftSchedule:
    """The registered `judge_drift`: its args (positions in fractions of the budget) -> clocks."""
    config = JudgeDriftConfig.model_validate(args, context={"budget": budget})
    if config.targets is not None:
        try:
            targets = build_schedule(config.targets.type, config.targets.args, budget=budget, archetypes=archetypes)
        except ValidationError as exc:  # the inner schedule's fields, named where they sit
            lines = [f"targets.args.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
            raise ValueError("schedule.args." + "\n  schedule.args.".join(lines)) from None
    else:
        assert config.style is not None
        if config.candidates is None and config.style not in archetypes:
            raise ValueError(
                f"schedule.args.style: '{config.style}' is not in world.archetypes {list(archetypes)}, "
                "the candidates when it lists none"
            )
        targets = PiecewiseSchedule([Phase(config.style, 0, budget, tuple(config.candidates or archetypes))])
    changes = [JudgeChange(c.judge, episodes(c.start, budget), episodes(c.window, budget)) for c in config.judges]
    return JudgeDriftSchedule(targets, changes, seed=config.seed, horizon=budget)


@dataclass(frozen=True)
class JudgeChange:
    """`judge` takes over at clock `start`: at once (`window` 0), or over [lo, hi) by a blend."""

    judge: str
    start: int
    window: int = 0

    @property
    def lo(self) -> int:
        return self.start - self.window // 2

    @property
    def hi(self) -> int:
        return self.lo + self.window


def _judge_hash(seed: int, t: int) -> float:
    """A uniform draw in [0, 1) from (seed, t) alone, apart from the gradual schedule's style draw."""
    digest = hashlib.blake2b(f"judge:{seed}:{t}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class JudgeDriftSchedule:
    """`targets` (any drift schedule) for the target, `changes` for the judge (see the module
    docstring). Every window must fit between its neighbours and inside `horizon` when given."""

    def __init__(self, targets: Any, changes: Sequence[JudgeChange], seed: int = 0, horizon: int | None = None) -> None:
        if callable(getattr(targets, "judge_at", None)):
            raise ValueError("judge_drift: its targets schedule changes the judge itself; nest no judge schedules")
        changes = list(changes)
        if len(changes) < 2 or changes[0].start != 0 or changes[0].window != 0:
            raise ValueError("judge_drift needs a first judge at clock 0 (no window) and at least one change")
        for k, (prev, cur) in enumerate(zip(changes, changes[1:]), start=1):
            if cur.judge == prev.judge or cur.window < 0:
                raise ValueError(f"judge change {k} ({cur}): not a change of judge, or a negative window")
            if cur.lo < prev.hi or cur.lo < 1:
                raise ValueError(
                    f"judge change {k} ({cur.judge} at {cur.start}): its window [{cur.lo}, {cur.hi}) starts before "
                    f"the previous change is complete (at {max(prev.hi, 1)}); use a smaller window or later start"
                )
            if horizon is not None and cur.hi > horizon:
                raise ValueError(
                    f"judge change {k} ({cur.judge}): its window ends at {cur.hi}, after the run {horizon}"
                )
        self.targets, self.changes, self.seed = targets, changes, int(seed)
        self._los = [c.lo for c in changes]

    def target(self, t: int) -> Target:
        return self.targets.target(t)

    def judge_at(self, t: int) -> str:
        """The judge whose verdict counts at clock t (inside a blend, the seeded draw's)."""
        t = check_clock(t)
        k = bisect.bisect_right(self._los, t) - 1
        change = self.changes[k]
        if t >= change.hi:
            return change.judge
        p_new = (t - change.lo + 0.5) / change.window
        return change.judge if _judge_hash(self.seed, t) < p_new else self.changes[k - 1].judge

    def new_judge_probability(self, t: int) -> float:
        """The chance that the verdict at t comes from the newer judge of the blend around t (1.0 outside blends)."""
        t = check_clock(t)
        change = self.changes[bisect.bisect_right(self._los, t) - 1]
        return 1.0 if t >= change.hi else (t - change.lo + 0.5) / change.window

    def switch_points(self) -> list[int]:
        """The target's switches and every judge change (a blend's at the middle of its window)."""
        return sorted({*self.targets.switch_points(), *(c.start for c in self.changes[1:])})

    def windows(self) -> list[tuple[int, int]]:
        """The target's transition windows and the judge blends' (where either may flip back and forth)."""
        own = [(c.lo, c.hi) for c in self.changes if c.window > 0]
        return sorted([*getattr(self.targets, "windows", list)(), *own])

    def judge_changes(self) -> list[dict[str, Any]]:
        """Each change as the manifest records it: its clock, the judges before and after, its window."""
        return [
            {"t": cur.start, "from_judge": prev.judge, "to_judge": cur.judge, "window": [cur.lo, cur.hi]}
            for prev, cur in zip(self.changes, self.changes[1:])
        ]

    def __repr__(self) -> str:
        return f"JudgeDriftSchedule({self.targets!r}, {self.changes}, seed={self.seed})"


def is_judge_schedule(schedule: Any) -> bool:
    """Whether a schedule changes the judge (has `judge_at`)."""
    return callable(getattr(schedule, "judge_at", None))


__all__ = ["DEFAULT_JUDGE", "JudgeChange", "JudgeDriftSchedule", "is_judge_schedule", "judge_drift"]
