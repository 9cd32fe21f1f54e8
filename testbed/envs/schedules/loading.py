"""One road for every drift schedule, built-in or a user's: look the `kind` up in the registry,
validate the scenario's keys with the class's own `Config`, build it, and check what it says
against the world before any training starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from testbed import registry
from testbed.types import Target

MAX_CHECKED_CLOCKS = 2_000_000  # target() is checked at every clock up to this many


def build_schedule(kind: str, args: dict[str, Any], *, budget: int, archetypes: Sequence[str]) -> Any:
    """`kind` (a registered name or "package.module:Name") and its keys -> a schedule object.

    A class with a pydantic `Config` has its keys validated by it (a pydantic ValidationError
    escapes, for the caller to name the fields); with `from_config(config, budget=, archetypes=)`
    it converts budget fractions itself, else it is built as `cls(**config.model_dump())`. A class
    without `Config` gets the keys as keyword arguments (positions in episodes); a ready-made
    object takes none."""
    obj = registry.load("schedule", kind)
    config_cls = getattr(obj, "Config", None)
    if config_cls is not None:
        config = config_cls.model_validate(args)
        if hasattr(obj, "from_config"):
            obj = obj.from_config(config, budget=budget, archetypes=tuple(archetypes))
        else:
            obj = obj(**config.model_dump())
    elif isinstance(obj, type) or (callable(obj) and not is_schedule(obj)):
        try:
            obj = obj(**args)
        except TypeError as exc:
            raise ValueError(f"cannot build schedule {kind!r} with arguments {args}: {exc}") from exc
    elif args:
        raise ValueError(f"{kind!r} is not a class or factory, so it cannot take arguments {args}")
    if not is_schedule(obj):
        raise ValueError(f"{kind!r} gave a {type(obj).__name__}, which is not a drift schedule: it needs callable "
                         "methods target(t) -> Target and switch_points() -> list[int]")
    return obj


def is_schedule(obj: Any) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "target", None)) and callable(getattr(obj, "switch_points", None))


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


def check_schedule(schedule: Any, budget: int, world_styles: Sequence[str]) -> None:
    """Ask `target(t)` at every clock of the run and `switch_points()` once: each target must be a
    Target whose style is in the world and in its candidates, and the switch points must be where
    the style changes (inside a gradual schedule's `windows()` the style may flip either way)."""
    name = type(schedule).__name__
    changes, previous = [], None
    for t in range(min(budget, MAX_CHECKED_CLOCKS)):
        target = schedule.target(t)
        if not isinstance(target, Target):
            raise ValueError(f"schedule {name}: target({t}) returned a {type(target).__name__} ({target!r}), "
                             "not a testbed.types.Target(style, candidates)")
        candidates = tuple(target.candidates)
        for style in (target.style, *candidates):
            if style not in world_styles:
                raise ValueError(f"schedule {name}: target({t}) has style '{style}', which is not in world.styles "
                                 f"({', '.join(world_styles)})")
        if target.style not in candidates:
            raise ValueError(f"schedule {name}: target({t}) wants '{target.style}', which is not among its "
                             f"candidates {candidates}: the prompt would not offer it")
        if previous is not None and target.style != previous:
            changes.append(t)
        previous = target.style
    declared = list(schedule.switch_points())
    if any(not isinstance(s, int) or isinstance(s, bool) for s in declared) or declared != sorted(set(declared)):
        raise ValueError(f"schedule {name}: switch_points() must be sorted, distinct ints, got {declared}")
    windows = list(getattr(schedule, "windows", lambda: [])())
    inside = lambda t: any(lo <= t < hi for lo, hi in windows)  # noqa: E731
    checked = [s for s in declared if s < MAX_CHECKED_CLOCKS and not inside(s)]
    for s in checked:
        if s not in changes:
            raise ValueError(f"schedule {name}: switch_points() lists t={s}, but target() does not change style there "
                             f"(it changes at {changes[:10]})")
    for c in changes:
        if not inside(c) and c not in declared:
            raise ValueError(f"schedule {name}: target() changes style at t={c}, but switch_points() does not list it "
                             f"({declared[:10]}); the report would miss that switch")
