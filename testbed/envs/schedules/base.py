"""What every drift schedule shares: clock and candidate checks, the Phase type, and the
scenario-side args (positions as fractions of the episode budget, or episodes with `unit: episodes`;
on the simulated clock, `schedule.clock: sim_seconds`, fractions of `schedule.horizon_s` or
simulated seconds with `unit: seconds`)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

# the args that are positions on the clock: fractions of the budget, or episodes with `unit: episodes`
POSITIONS = ("start", "end", "window", "period", "mean_phase", "min_phase")


class StrictArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleConfig(StrictArgs):
    """Base of every built-in schedule's `args`. Positions are fractions of the episode budget,
    so a scenario keeps its shape when the budget changes; `unit: episodes` gives them in judged
    episodes instead, checked against the budget (passed as the validation context); `unit: seconds`
    gives them in simulated seconds, checked against `schedule.horizon_s` (the budget of a schedule
    on the simulated clock)."""

    unit: Literal["fraction", "episodes", "seconds"] = Field("fraction", description="what the positions count")

    @model_validator(mode="before")
    @classmethod
    def _episodes_to_fractions(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or data.get("unit") not in ("episodes", "seconds"):
            return data
        budget = (info.context or {}).get("budget")
        if budget is None:
            raise ValueError(
                f"unit: {data['unit']} needs the budget to check the positions against (given when a scenario loads)"
            )
        return fractions_of(data, budget, "", data["unit"])


def fractions_of(data: dict[str, Any], budget: int, where: str, unit: str = "episodes") -> dict[str, Any]:
    """`data` with its positions (POSITIONS, also inside `phases` and `judges`) in clock units (episodes, or
    simulated seconds) turned into fractions of `budget`; a position outside 0..budget is named
    with its field."""
    out = dict(data)
    bound = "budget.episodes" if unit == "episodes" else "schedule.horizon_s"
    for key, value in data.items():
        if key in POSITIONS and isinstance(value, (int, float)) and not isinstance(value, bool):
            if not 0 <= value <= budget:
                raise ValueError(f"{where}{key}: {value} {unit} is outside the budget (0..{bound}={budget})")
            out[key] = value / budget
        elif key in ("phases", "judges") and isinstance(value, list):  # a judge_drift's changes too
            out[key] = [
                fractions_of(p, budget, f"{where}{key}.{i}.", unit) if isinstance(p, dict) else p
                for i, p in enumerate(value)
            ]
    return out


def check_clock(t: int) -> int:
    if isinstance(t, bool):
        raise TypeError(f"clock t must be an int, got a bool: {t!r}")
    try:
        t = operator.index(t)  # ints and numpy integers
    except TypeError:
        raise TypeError(f"clock t must be an int, got {type(t).__name__}: {t!r}") from None
    if t < 0:
        raise ValueError(f"clock t must be >= 0, got {t}")
    return t


def check_candidates(candidates: Sequence[str], where: str) -> tuple[str, ...]:
    if isinstance(candidates, str):
        raise ValueError(f"{where}: candidates must be a sequence of style names, got the string {candidates!r}")
    cands = tuple(candidates)
    if not cands:
        raise ValueError(f"{where}: candidates is empty")
    if len(set(cands)) != len(cands):
        raise ValueError(f"{where}: candidates {cands} contain a duplicate")
    return cands


def check_styles(styles: Sequence[str], name: str) -> list[str]:
    if isinstance(styles, str):
        raise ValueError(f"{name}: styles must be a list of style names, got the string {styles!r}")
    styles = list(styles)
    if not styles:
        raise ValueError(f"{name}: styles is empty")
    return styles


def resolve_candidates(styles: Sequence[str], candidates: Sequence[str] | None, name: str) -> tuple[str, ...]:
    if candidates is None:
        return tuple(dict.fromkeys(styles))
    cands = check_candidates(candidates, name)
    missing = [s for s in dict.fromkeys(styles) if s not in cands]
    if missing:
        raise ValueError(f"{name}: styles {missing} are not in candidates {cands}")
    return cands


def episodes(fraction: float, budget: int) -> int:
    """A fraction of the budget in clock units (judged episodes)."""
    return round(fraction * budget)


@dataclass(frozen=True)
class Phase:
    """One stretch of constant target: clocks ``start <= t < end`` want ``style``, and the prompt
    lists ``candidates`` (which must include ``style``)."""

    style: str
    start: int
    end: int
    candidates: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.candidates, str):
            raise ValueError(
                f"phase {self.style!r}: candidates must be a sequence of style names, got the string "
                f"{self.candidates!r}"
            )
        object.__setattr__(self, "candidates", tuple(self.candidates))  # lists from YAML -> a tuple


class PhaseConfig(StrictArgs):
    """A phase as a scenario writes it: start and end as fractions of the budget."""

    style: str
    start: float = Field(ge=0.0, le=1.0)
    end: float = Field(gt=0.0, le=1.0)
    candidates: list[str] | None = None  # default: the scenario's archetypes

    @field_validator("candidates")
    @classmethod
    def _offers_style(cls, candidates: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # Named here, in the fractions the user wrote; check_schedule would only see clock units.
        style = info.data.get("style")
        if candidates is not None and style is not None and style not in candidates:
            span = (
                f" ({info.data['start']}-{info.data['end']} of the budget)"
                if {"start", "end"} <= info.data.keys()
                else ""
            )
            raise ValueError(f"style '{style}'{span} is not among the phase's candidates {candidates}")
        return candidates

    @model_validator(mode="after")
    def _ordered(self) -> PhaseConfig:
        if self.end <= self.start:
            raise ValueError(f"phase '{self.style}' ends ({self.end}) before it starts ({self.start})")
        return self


class PhasesConfig(ScheduleConfig):
    """Contiguous phases covering the whole budget, in fractions."""

    phases: list[PhaseConfig]

    @field_validator("phases")
    @classmethod
    def _contiguous(cls, phases: list[PhaseConfig]) -> list[PhaseConfig]:
        if not phases:
            raise ValueError("needs at least one phase")
        if phases[0].start != 0.0:
            raise ValueError(f"phases[0] starts at {phases[0].start}; the first phase must start at 0.0")
        for i in range(1, len(phases)):
            prev, cur = phases[i - 1], phases[i]
            if abs(cur.start - prev.end) > 1e-9:
                what = "overlaps" if cur.start < prev.end else "leaves a gap after"
                raise ValueError(
                    f"phases[{i}] starts at {cur.start} but phases[{i - 1}] ends at {prev.end}: it {what} "
                    "the previous phase (phases must be contiguous)"
                )
        if abs(phases[-1].end - 1.0) > 1e-9:
            raise ValueError(f"the last phase ends at {phases[-1].end}; it must end at 1.0 (the whole budget)")
        return phases

    def phases_in_episodes(self, budget: int, archetypes: Sequence[str]) -> list[Phase]:
        out = []
        for i, p in enumerate(self.phases):
            start, end = episodes(p.start, budget), episodes(p.end, budget)
            if end - start < 1:
                raise ValueError(
                    f"schedule.args.phases.{i} ({p.style}, {p.start}-{p.end} of the budget) is shorter than "
                    f"one episode at budget.episodes={budget}"
                )
            if p.candidates is None and p.style not in archetypes:
                raise ValueError(
                    f"schedule.args.phases.{i}.style: '{p.style}' ({p.start}-{p.end} of the budget) is not in "
                    f"world.archetypes {list(archetypes)}, the phase's candidates when it lists none"
                )
            out.append(Phase(p.style, start, end, tuple(p.candidates or archetypes)))
        return out
