"""Pydantic validation errors as a scenario's readers want them: one line per problem, named by its
dotted path, with a "did you mean" for a misspelt key."""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from testbed.scenario.loading import clip

MAX_PROBLEMS = 20  # validation problems listed in one message


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The known keys of the section that `loc` points into (for "did you mean" hints)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(part) or next(
            (f for f in current.model_fields.values() if f.alias == part), None
        )
        if field is None:
            # a discriminated union shows the variant's tag in the location ("piecewise")
            return []
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """list[X] -> X, X | None -> X, Annotated[Union[...]] -> the union (left as is)."""
    while True:
        origin = get_origin(annotation)
        if origin in (list, tuple):
            annotation = get_args(annotation)[0]
        elif origin is Union or str(origin) == "types.UnionType":
            models = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
            if len(models) != 1:
                return annotation
            annotation = models[0]
        elif origin is Annotated:
            annotation = get_args(annotation)[0]
        else:
            return annotation


def format_validation_error(exc: ValidationError, model: type[BaseModel], source: str) -> str:
    lines = [f"{source}: invalid scenario ({exc.error_count()} problem{'s' if exc.error_count() > 1 else ''})"]
    errors = exc.errors()
    for err in errors[:MAX_PROBLEMS]:  # keys and values are clipped: the input may be huge
        loc = tuple(err["loc"])
        # drop the discriminator tag pydantic inserts for tagged unions
        where = clip(".".join(str(p) for p in loc), 200) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = _fields_at(model, loc)
            hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
            msg = f"unknown key '{clip(str(loc[-1]), 80)}'"
            if hint:
                msg += f" (did you mean '{hint[0]}'?)"
            elif known:
                msg += f" (expected one of: {', '.join(known)})"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if (
                "input" in err
                and err["type"] not in ("value_error", "assertion_error")
                and not isinstance(err["input"], dict)
            ):
                msg += f" (got {clip(repr(err['input']), 100)})"
        lines.append(f"  {where}: {msg}")
    if len(errors) > MAX_PROBLEMS:
        lines.append(f"  ... and {len(errors) - MAX_PROBLEMS} more problems")
    return "\n".join(lines)
