"""Environments and drift schedules.

``StyleShiftEnv`` (single turn, hidden drifting target style) is registered with Gymnasium as
``"testbed/StyleShift-v0"``::

    env = gymnasium.make("testbed/StyleShift-v0", judge=judge, schedule=schedule, prompt_specs=specs)

This package never imports ``judges``: the judge object arrives through the constructor.
"""

import gymnasium

from testbed.envs.schedules import (
    GradualSchedule,
    PeriodicSchedule,
    Phase,
    PiecewiseSchedule,
    RandomSchedule,
    build_schedule,
)
from testbed.envs.style_shift import EpisodeStart, StyleShiftEnv, episode_info

STYLE_SHIFT_ENV_ID = "testbed/StyleShift-v0"

if STYLE_SHIFT_ENV_ID not in gymnasium.registry:
    gymnasium.register(id=STYLE_SHIFT_ENV_ID, entry_point="testbed.envs.style_shift:StyleShiftEnv")

__all__ = [
    "STYLE_SHIFT_ENV_ID",
    "EpisodeStart",
    "GradualSchedule",
    "PeriodicSchedule",
    "Phase",
    "PiecewiseSchedule",
    "RandomSchedule",
    "StyleShiftEnv",
    "episode_info",
    "build_schedule",
]
