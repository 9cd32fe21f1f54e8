"""Drift schedules: which style the hidden reward wants at each point of a run.

Every schedule works in clock units: ``t`` = the number of judged episodes so far (an int >= 0,
owned and advanced by the env). Schedules are pure and deterministic: ``target(t)`` depends only
on ``t`` and the schedule's own arguments (its seed included), never on call order, so a resumed
run or an analysis script sees exactly the targets the training run saw.

Each schedule implements the :class:`testbed.protocols.DriftSchedule` protocol:

- ``target(t) -> Target(style, candidates)``: the wanted style and the candidate styles the
  prompt lists at clock ``t``;
- ``switch_points() -> list[int]``: the clocks at which the target style changes (for gradual
  drift, the middle of each transition window);

and, for analysis, ``phases() -> list[(start, end, style)]`` (end exclusive). A schedule may
also change the judge: ``judge_at(t) -> str`` names the judge in force at ``t`` ("default", the
scenario's ``judge``, or a key of its ``judges:``), and ``switch_points()`` then lists the judge's
changes too (``judge_drift.py``: any target schedule plus steps and blends of judges).

A scenario names one as ``schedule: {type: NAME, args: {...}}``; the registry maps the name (or an
import path "package.module:Name") to a class or factory, whose pydantic ``Config`` checks the
args, and which is built as ``factory(budget=, archetypes=, **args)`` so that it turns the args'
fractions of the budget into clocks (``loading.py``; ``unit: episodes`` gives the built-ins'
positions in episodes). Adding a schedule touches one file: its module (and a line in the
registry for a short name).
"""

from testbed.envs.schedules.base import Phase
from testbed.envs.schedules.judge_drift import JudgeChange, JudgeDriftSchedule
from testbed.envs.schedules.loading import build_schedule, check_schedule, is_schedule, style_fields
from testbed.envs.schedules.periodic import PeriodicSchedule
from testbed.envs.schedules.piecewise import GradualSchedule, PiecewiseSchedule
from testbed.envs.schedules.random_switches import RandomSchedule

__all__ = [
    "GradualSchedule",
    "JudgeChange",
    "JudgeDriftSchedule",
    "PeriodicSchedule",
    "Phase",
    "PiecewiseSchedule",
    "RandomSchedule",
    "build_schedule",
    "check_schedule",
    "is_schedule",
    "style_fields",
]
