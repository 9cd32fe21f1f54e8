"""Environments and drift schedules.

``StyleShiftEnv`` (single turn, hidden drifting target style) is registered with Gymnasium as
``"testbed/StyleShift-v0"``. With no arguments it is the headline experiment (the rubric judge,
cute -> chuunibyou -> classical switching at episodes 2400 and 4200, the training prompts; see
``testbed.envs.defaults``); keyword arguments override any of them::

    env = gymnasium.make("testbed/StyleShift-v0")
    env = gymnasium.make("testbed/StyleShift-v0", judge=judge, schedule=schedule, prompt_specs=specs, seed=3)

This package never imports ``judges`` statically: the default judge is loaded through the
registry when the entry point runs.

``RevisionEnv`` (multi-turn: drafts, editor notes, revisions; ``testbed.envs.revision``) is
registered as ``"testbed/Revision-v0"`` with the same defaults and its own settings
(``max_turns``, ``feedback``, ``hints``, ``turn_rewards``) as keyword arguments.
"""

import gymnasium

from testbed.envs.defaults import default_schedule, make_revision_env, make_style_shift_env
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
REVISION_ENV_ID = "testbed/Revision-v0"

if STYLE_SHIFT_ENV_ID not in gymnasium.registry:
    gymnasium.register(id=STYLE_SHIFT_ENV_ID, entry_point="testbed.envs.defaults:make_style_shift_env")
if REVISION_ENV_ID not in gymnasium.registry:
    gymnasium.register(id=REVISION_ENV_ID, entry_point="testbed.envs.defaults:make_revision_env")

__all__ = [
    "REVISION_ENV_ID",
    "STYLE_SHIFT_ENV_ID",
    "EpisodeStart",
    "GradualSchedule",
    "PeriodicSchedule",
    "Phase",
    "PiecewiseSchedule",
    "RandomSchedule",
    "StyleShiftEnv",
    "build_schedule",
    "default_schedule",
    "episode_info",
    "make_revision_env",
    "make_style_shift_env",
]
