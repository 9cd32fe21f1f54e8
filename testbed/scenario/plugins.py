"""The scenario's plugin sections: a judge, the gold judge, the drift schedule, the rollout engine and
the environment, each a registered name or an import path with arguments its own Config checks.
Re-exported by testbed.scenario.schema, where the rest of the schema lives."""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from testbed import registry
from testbed.scenario.loading import clip



def validate_args(config: Any, args: dict, what: str) -> None:
    """A plugin's `args` through its pydantic `Config`: the first problem, named by its field."""
    try:
        config.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{what}: args.{where}: {first['msg']} (got {clip(repr(first.get('input')), 80)})") from None

class Strict(BaseModel):
    # inf/nan pass `gt=0`-style bounds (inf) or fail them with a puzzling message (nan): refuse both
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


def _plugin_shorthand(value: Any) -> Any:
    # `judge: rubric` is short for `judge: {name: rubric}`.
    return {"name": value} if isinstance(value, str) else value


class JudgeConfig(Strict):
    """A built-in judge by `name`, or a user's judge by `class: "package.module:Name"`."""

    name: str | None = None
    class_: str | None = Field(None, alias="class")
    args: dict[str, Any] = Field(default_factory=dict)

    _shorthand = model_validator(mode="before")(_plugin_shorthand)

    @model_validator(mode="after")
    def _one_of(self) -> JudgeConfig:
        if (self.name is None) == (self.class_ is None):
            raise ValueError("give exactly one of 'name' (a built-in judge) or 'class' (an import path)")
        if self.name is not None:
            registry.resolve("judge", self.name)
        return self

    @property
    def path(self) -> str:
        return self.class_ or registry.resolve("judge", self.name or "")


class GoldJudgeConfig(JudgeConfig):
    """A judge that scores training episodes beside the training judge and never trains: the gap
    between the two rewards is what the policy learned that the gold judge does not reward."""

    share: float = Field(1.0, gt=0, le=1, description="share of judged training episodes it scores (a hash of the clock picks them)")


class ScheduleSpec(BaseModel):
    """`schedule: {kind: NAME, ...}`: `kind` is a registered schedule (piecewise, gradual, periodic,
    random) or an import path "package.module:Name"; the other keys belong to that schedule and
    are validated by its own `Config` when the scenario loads (see testbed/envs/schedules)."""

    model_config = ConfigDict(extra="allow")
    kind: str = "piecewise"

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        registry.resolve("schedule", kind)
        return kind

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class EngineConfig(Strict):
    """The rollout engine: a registered name (`hf`, `vllm`) or an import path; `args` go to its constructor."""

    name: str = "hf"
    args: dict[str, Any] = Field(default_factory=dict)
    mismatch: bool | None = Field(None, description=(
        "mismatch_* columns in updates.parquet (engine vs trainer log-probs, one no-grad forward per update); "
        "default: on for every engine but hf, whose log-probs are the trainer's own code"))

    _shorthand = model_validator(mode="before")(_plugin_shorthand)

    @model_validator(mode="after")
    def _known_engine(self) -> EngineConfig:
        try:
            cls = registry.load("engine", self.name)
        except registry.RegistryError as exc:
            raise ValueError(f"name: {exc}") from None
        config = getattr(cls, "Config", None)  # an engine may validate its args
        if config is not None:
            validate_args(config, self.args, f"engine {self.name}")
        else:  # no Config: the constructor's keywords are what it takes (after policy, tokenizer, sampling)
            unknown = _unknown_keywords(cls, self.args)
            if unknown:
                raise ValueError(f"engine {self.name}: args {unknown} are not arguments of {cls.__name__} "
                                 "(engine.args of another engine?)")
        return self

    @property
    def measure_mismatch(self) -> bool:
        return self.mismatch if self.mismatch is not None else self.name != "hf"


def _unknown_keywords(cls: Any, args: dict[str, Any]) -> list[str]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a builtin or an odd callable: its own error will do
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    return sorted(set(args) - names)


class EnvConfig(Strict):
    """The environment: a registered name (`style_shift`, `revision`) or an import path to a
    StyleShiftEnv subclass; `args` go to its constructor and are checked by its `Config`."""

    name: str = "style_shift"
    args: dict[str, Any] = Field(default_factory=dict)

    _shorthand = model_validator(mode="before")(_plugin_shorthand)

    @model_validator(mode="after")
    def _known_env(self) -> EnvConfig:
        cls = registry.load("env", self.name)
        config = getattr(cls, "Config", None)
        if config is not None:
            validate_args(config, self.args, f"env {self.name}")
        elif self.args:
            raise ValueError(f"env {self.name} takes no args, got {sorted(self.args)}")
        return self

    def settings(self) -> Any:
        """The validated args (the env's Config), or None for an env without one."""
        config = getattr(registry.load("env", self.name), "Config", None)
        return config.model_validate(self.args) if config is not None else None
