"""Trainer arguments that were renamed or moved. A scenario that still spells one the old way is
refused with the new spelling, where pydantic alone would only say "unknown key"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from testbed.scenario.loading import clip

# the new spelling, from the old key's value and all the args (a new value may depend on others)
Hint = Callable[[Any, dict[str, Any]], str]


def show(value: Any) -> str:
    return clip(repr(value), 40)


def renamed_to(new: str) -> Hint:
    """The hint for a key renamed to `new`, with the same value."""
    return lambda value, args: f"{new}: {show(value)}"


def moved_to_runtime(value: Any, args: dict[str, Any]) -> str:
    """The hint for SAO's old `staleness_bound`: the runtime applies the one bound now."""
    return (
        f"runtime.max_staleness: {show(value)} (or, for this arm only, its runtime: {{max_staleness: {show(value)}}}), "
        f"applied by the runtime before a batch reaches the trainer"
    )


def refuse_renamed(args: Any, renamed: Mapping[str, Hint]) -> Any:
    """For a `model_validator(mode="before")`: raise, naming each old key in `args`, its value and
    the new spelling; otherwise return `args` as they are."""
    if not isinstance(args, dict):
        return args
    problems = [
        f"{key}: {show(args[key])} is now {hint(args[key], args)}" for key, hint in renamed.items() if key in args
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return args
