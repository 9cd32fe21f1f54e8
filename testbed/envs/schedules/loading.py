"""One road for every drift schedule, built-in or a user's: look the `type` up in the registry,
check its args (its `Config`, or its signature), build it as `factory(budget=, archetypes=, **args)`,
and check what it says against the world before any training starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from testbed import registry
from testbed.protocols import DEFAULT_JUDGE
from testbed.types import Target

MAX_CHECKED_CLOCKS = 2_000_000  # target() is checked at every clock up to this many


def build_schedule(kind: str, args: dict[str, Any], *, budget: int, archetypes: Sequence[str]) -> Any:
    """`kind` (a registered name or "package.module:Name") and its args -> a schedule object.

    A class or factory is called with the run's `budget` (episodes) and the world's `archetypes`
    as keywords beside its args (registry.INPUTS), so it can turn fractions of the budget into
    clocks; its args are checked first (a pydantic ValidationError escapes, for the caller to
    name the field). A ready-made schedule object takes no args."""
    obj = registry.load("schedule", kind)
    if is_schedule(obj):
        if args:
            raise ValueError(
                f"schedule.args: {kind!r} is a ready-made schedule, not a class or factory: it takes no args "
                f"(got {sorted(args)})"
            )
        return obj
    lacks = isinstance(obj, type) and not (
        callable(getattr(obj, "target", None)) and callable(getattr(obj, "switch_points", None))
    )
    if not callable(obj) or lacks:
        what = f"the class {obj.__name__}" if lacks else f"a {type(obj).__name__}"
        raise ValueError(
            f"{kind!r} is {what}, which is not a drift schedule: it needs callable "
            "methods target(t) -> Target and switch_points() -> list[int]"
        )
    try:
        registry.check_args("schedule", obj, args, {"budget": budget})
    except ValueError as exc:
        if type(exc) is not ValueError:  # a pydantic ValidationError: the caller names its fields
            raise
        raise ValueError(f"schedule.{exc}") from None
    try:
        schedule = registry.build(obj, args, budget=budget, archetypes=tuple(archetypes))
    except TypeError as exc:
        raise ValueError(f"cannot build schedule {kind!r} with args {args}: {exc}") from exc
    if not is_schedule(schedule):
        raise ValueError(
            f"{kind!r} gave a {type(schedule).__name__}, which is not a drift schedule: it needs callable "
            "methods target(t) -> Target and switch_points() -> list[int]"
        )
    return schedule


def is_schedule(obj: Any) -> bool:
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "target", None))
        and callable(getattr(obj, "switch_points", None))
    )


def style_fields(data: Any, path: str = "schedule") -> list[tuple[str, str]]:
    """(field path, style name) for every `style`, `styles` and `candidates` key in a schedule's
    validated keys, so a style the world lacks is named by its field."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}"
            if key == "style" and isinstance(value, str):
                found.append((where, value))
            elif key in ("styles", "candidates") and isinstance(value, list):
                found += [(where, v) for v in value if isinstance(v, str)]
            else:
                found += style_fields(value, where)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += style_fields(item, f"{path}.{i}")
    return found


def check_schedule(
    schedule: Any, budget: int, world_styles: Sequence[str], judge_names: Sequence[str] | None = None
) -> None:
    """Ask `target(t)` (and `judge_at(t)`, where the schedule changes the judge) at every clock of
    the run and `switch_points()` once: each target must be a Target whose style is in the world and
    in its candidates, each judge one of `judge_names` (default: the scenario's judge alone), every
    judge named there must be in force somewhere, and the switch points must be where the style or
    the judge changes (inside a gradual schedule's `windows()` either may flip back and forth)."""
    name = type(schedule).__name__
    pick = getattr(schedule, "judge_at", None)
    names = list(judge_names or [DEFAULT_JUDGE])
    changes, previous, seen = [], None, set()
    for t in range(min(budget, MAX_CHECKED_CLOCKS)):
        now = (_checked_target(schedule, t, world_styles), _checked_judge(pick, t, names) if callable(pick) else None)
        seen.add(now[1])
        if previous is not None and now != previous:
            changes.append(t)
        previous = now
    unused = [n for n in names if n != DEFAULT_JUDGE and n not in seen]
    if unused:
        raise ValueError(
            f"judges: {', '.join(unused)} never score(s) an episode: schedule {name} "
            f"{'never switches to them (judge_at)' if callable(pick) else 'does not change the judge (no judge_at)'}"
        )
    _check_switch_points(schedule, changes)


def _checked_target(schedule: Any, t: int, world_styles: Sequence[str]) -> str:
    name = type(schedule).__name__
    target = schedule.target(t)
    if not isinstance(target, Target):
        raise ValueError(
            f"schedule {name}: target({t}) returned a {type(target).__name__} ({target!r}), "
            "not a testbed.types.Target(style, candidates)"
        )
    candidates = tuple(target.candidates)
    for style in (target.style, *candidates):
        if style not in world_styles:
            raise ValueError(
                f"schedule {name}: target({t}) has style '{style}', which is not in world.styles "
                f"({', '.join(world_styles)})"
            )
    if target.style not in candidates:
        raise ValueError(
            f"schedule {name}: target({t}) wants '{target.style}', which is not among its "
            f"candidates {candidates}: the prompt would not offer it"
        )
    return target.style


def _checked_judge(pick: Any, t: int, names: Sequence[str]) -> str:
    judge = pick(t)
    if judge not in names:
        raise ValueError(
            f"schedule: judge_at({t}) is {judge!r}, not one of the scenario's judges ({', '.join(names)}); "
            f"'{DEFAULT_JUDGE}' is the scenario's `judge`, the others are the keys of its `judges:`"
        )
    return judge


def _check_switch_points(schedule: Any, changes: list[int]) -> None:
    name, judges = type(schedule).__name__, callable(getattr(schedule, "judge_at", None))
    declared = list(schedule.switch_points())
    if any(not isinstance(s, int) or isinstance(s, bool) for s in declared) or declared != sorted(set(declared)):
        raise ValueError(f"schedule {name}: switch_points() must be sorted, distinct ints, got {declared}")
    windows = list(getattr(schedule, "windows", list)())
    inside = lambda t: any(lo <= t < hi for lo, hi in windows)  # noqa: E731
    checked = [s for s in declared if s < MAX_CHECKED_CLOCKS and not inside(s)]
    for s in checked:
        if s not in changes:
            what = "neither target() nor judge_at() changes" if judges else "target() does not change style"
            raise ValueError(
                f"schedule {name}: switch_points() lists t={s}, but {what} there (it changes at {changes[:10]})"
            )
    for c in changes:
        if not inside(c) and c not in declared:
            raise ValueError(
                f"schedule {name}: target(){' or judge_at()' if judges else ''} changes at t={c}, but "
                f"switch_points() does not list it ({declared[:10]}); the report would miss that switch"
            )
