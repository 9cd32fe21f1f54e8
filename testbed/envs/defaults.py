"""What ``gymnasium.make("testbed/StyleShift-v0")`` builds when it is given nothing: the
headline experiment's env, so that the registered id works as a Gymnasium user expects.

  judge         the embedded rubric judge, loaded through the registry on use (the core never
                imports ``judges/`` statically; a judge is a plugin like any other);
  schedule      the headline's three phases in episodes (the drift clock ``t``): cute for
                0-2399, chuunibyou for 2400-4199, classical from 4200 on (the shipped scenario's
                40% / 70% of 6,000 episodes); the last switch also changes the candidate list;
  prompt_specs  the world's training prompts.

Every keyword argument of :class:`StyleShiftEnv` may be given to override these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from testbed.envs.schedules import Phase, PiecewiseSchedule
from testbed.envs.style_shift import StyleShiftEnv
from testbed.protocols import DriftSchedule, Judge

if TYPE_CHECKING:
    from testbed.world import PromptSpec

DEFAULT_BUDGET = 6000
_FIRST = ("academic", "cute", "chuunibyou")
_LAST = ("classical", "cute", "chuunibyou")


def default_schedule() -> PiecewiseSchedule:
    """cute -> chuunibyou -> classical, switching at episodes 2400 and 4200."""
    return PiecewiseSchedule(
        [
            Phase("cute", 0, 2400, _FIRST),
            Phase("chuunibyou", 2400, 4200, _FIRST),
            Phase("classical", 4200, DEFAULT_BUDGET, _LAST),
        ]
    )


def default_judge() -> Judge:
    # loaded here, not at import time: `testbed` stands below `judges/` and names it only by string
    from testbed import registry

    return registry.load("judge", "rubric")()


def make_style_shift_env(
    judge: Judge | None = None,
    schedule: DriftSchedule | None = None,
    prompt_specs: Sequence[PromptSpec] | None = None,
    **kwargs: Any,
) -> StyleShiftEnv:
    """The entry point registered as ``testbed/StyleShift-v0``: defaults for what is not given."""
    return _with_defaults(StyleShiftEnv, judge, schedule, prompt_specs, **kwargs)


def make_revision_env(
    judge: Judge | None = None,
    schedule: DriftSchedule | None = None,
    prompt_specs: Sequence[PromptSpec] | None = None,
    **kwargs: Any,
) -> StyleShiftEnv:
    """The entry point registered as ``testbed/Revision-v0``: the same defaults, in the revision env."""
    from testbed.envs.revision import RevisionEnv

    return _with_defaults(RevisionEnv, judge, schedule, prompt_specs, **kwargs)


def _with_defaults(
    cls: type,
    judge: Judge | None,
    schedule: DriftSchedule | None,
    prompt_specs: Sequence[PromptSpec] | None,
    **kwargs: Any,
) -> StyleShiftEnv:
    if prompt_specs is None:
        from testbed.world import prompts  # the env module itself loads without the world

        prompt_specs = prompts("train")
    return cls(
        judge if judge is not None else default_judge(),
        schedule if schedule is not None else default_schedule(),
        prompt_specs,
        **kwargs,
    )
