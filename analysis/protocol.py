"""The protocol: the claims the testbed judges and how, fixed before the runs (analysis/protocol.yaml).

`load_protocol()` reads and checks it (a bad field is an error naming it); `Claim` is one claim:
the arms (X claimed better than Y), its primary endpoint, the scenario whose run holds both arms,
the task it is judged on (by default "all": each seed's mean over the switches, or over the segments
after them) and the smallest difference that matters (`margin`: "10%" of |Y's mean|, or a number in
the endpoint's unit). A claim whose arms cannot differ where it runs carries `not_testable` with the
reason, and the card prints that instead of a seed count. A claim whose arms differ only in how they
correct for off-policy rollouts (`ratio_dependent`: DIS against PPO clip, routing replay against
none) is marked "not testable in this runtime" by the card when the run it finds never moved the
importance ratio (every update's approx_kl about 0: on-policy rollouts from an exact engine).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROTOCOL = Path(__file__).with_name("protocol.yaml")

# Each endpoint's unit of observation (a switch, or a segment between switches), name and direction.
ENDPOINTS: dict[str, tuple[str, str, str, bool]] = {
    # endpoint: (unit, what the card calls it, its unit, lower is better)
    "episodes_to_bar": ("switch", "episodes to the bar", "episodes", True),
    "judge_calls_to_bar": ("switch", "judge calls to the bar", "calls", True),
    "old_half_life": ("switch", "old style's half-life", "episodes", True),
    "auc_after": ("switch", "reward area after the switch", "reward per episode", False),
    "dynamic_regret": ("segment", "dynamic regret after switches", "reward per episode", True),
    "auc": ("segment", "reward area per segment", "reward per episode", False),
}


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    source: str
    text: str
    x: str  # the arm claimed better
    y: str
    endpoint: Literal["episodes_to_bar", "judge_calls_to_bar", "old_half_life", "auc_after", "dynamic_regret", "auc"]
    scenario: str
    task: str = "all"
    margin: str | float = "10%"
    not_testable: str | None = None
    ratio_dependent: bool = False  # the arms can differ only where the importance ratio moves

    @field_validator("margin")
    @classmethod
    def _margin(cls, value: str | float) -> str | float:
        if isinstance(value, str):
            text = value.strip()
            if not text.endswith("%") or not _is_number(text[:-1]) or float(text[:-1]) <= 0:
                raise ValueError(f"margin {value!r}: a share like '10%' or a positive number")
            return text
        if value <= 0:
            raise ValueError(f"margin {value!r} must be positive")
        return float(value)

    @model_validator(mode="after")
    def _arms(self) -> Claim:
        if self.x == self.y:
            raise ValueError(f"claim {self.id}: x and y are the same arm ({self.x})")
        return self

    @property
    def unit(self) -> str:
        return ENDPOINTS[self.endpoint][0]

    @property
    def lower_is_better(self) -> bool:
        return ENDPOINTS[self.endpoint][3]

    @property
    def command(self) -> str:
        return f"python -m testbed.run {self.scenario}"

    def margin_value(self, mean_y: float) -> float:
        """The smallest difference that matters, in the endpoint's unit (a share of |mean_y|)."""
        if isinstance(self.margin, str):
            return abs(mean_y) * float(self.margin[:-1]) / 100
        return float(self.margin)


class Protocol(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    power: float = Field(default=0.80, gt=0.5, lt=1)
    stages: list[int] = Field(default=[5, 10, 20, 40], min_length=1)
    budget_core_hours: float = Field(default=40.0, gt=0)
    claims: list[Claim] = Field(min_length=1)

    @field_validator("stages")
    @classmethod
    def _stages(cls, value: list[int]) -> list[int]:
        if value[0] < 2 or any(b <= a for a, b in zip(value, value[1:])):
            raise ValueError(f"stages {value}: cumulative seed counts, increasing, the first at least 2")
        return value

    @model_validator(mode="after")
    def _unique(self) -> Protocol:
        ids = [c.id for c in self.claims]
        if len(set(ids)) != len(ids):
            raise ValueError(f"claim ids must be unique: {sorted({i for i in ids if ids.count(i) > 1})}")
        return self

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r} in the protocol; its claims: {', '.join(c.id for c in self.claims)}")

    def for_scenario(self, scenario: str | Path) -> list[Claim]:
        """The claims judged on a scenario (by its file's stem)."""
        stem = Path(scenario).stem
        return [c for c in self.claims if Path(c.scenario).stem == stem]

    @property
    def look_alpha(self) -> float:
        """The level each look of a staged study tests at: alpha over the planned looks (Bonferroni)."""
        return self.alpha / len(self.stages)


class ProtocolError(ValueError):
    """A protocol file that cannot be read, naming the file and the field."""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@cache
def load_protocol(path: str | Path = DEFAULT_PROTOCOL) -> Protocol:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ProtocolError(f"{path}: {exc}") from exc
    try:
        return Protocol.model_validate(data)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ProtocolError(f"{path}: {where}") from None
