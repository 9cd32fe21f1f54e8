"""The scenario's plugin sections: the judge, the gold judge, the drift schedule, the rollout engine
and the environment (the arms' trainers are in schema.py). Every one is written the same way:

    SECTION: {type: NAME, args: {...}}

`type` is a registered name or an import path "package.module:Name" (testbed/registry.py) and
`args` are that plugin's settings, checked when the scenario loads by its `Config` (or, without
one, against its signature: registry.check_args, called for every plugin by schema.parse_scenario).
Settings of the section itself (gold_judge.share, engine.mismatch) stay beside `type`.
`judge: rubric` is short for `judge: {type: rubric}`."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from testbed import registry
from testbed.scenario.loading import clip


class Strict(BaseModel):
    # inf/nan pass `gt=0`-style bounds (inf) or fail them with a puzzling message (nan): refuse both
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class PluginSpec(Strict):
    """`{type: NAME, args: {...}}`; subclasses say which kind of plugin (`kind`) and its default."""

    kind: ClassVar[str]
    type: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @field_validator("type")
    @classmethod
    def _loads(cls, name: str) -> str:
        try:
            registry.load(cls.kind, name)
        except registry.RegistryError as exc:
            raise ValueError(str(exc)) from None
        return name

    def load(self) -> Any:
        """The class or factory `type` names."""
        return registry.load(self.kind, self.type)

    @property
    def path(self) -> str:
        return registry.resolve(self.kind, self.type)


class JudgeConfig(PluginSpec):
    """The judge: a class or factory built with `args`, or a ready-made judge (a function of one
    request, or an object) that takes none; testbed/judging/adapter.py accepts its shapes."""

    kind: ClassVar[str] = "judge"
    type: str = "rubric"


def _judge_names(judges: dict[str, JudgeConfig]) -> dict[str, JudgeConfig]:
    for name in judges:
        if name == "default" or not JUDGE_NAME.fullmatch(name):
            raise ValueError(
                f"{name!r}: a judge's name is letters, digits and '_' and not 'default' (the scenario's "
                "`judge` is 'default' to a schedule)"
            )
    return judges


JUDGE_NAME = re.compile(r"[A-Za-z0-9_]+")
# More judges a drift schedule may switch to, by name (`judge_at`, testbed/envs/schedules/judge_drift.py)
NamedJudges = Annotated[dict[str, JudgeConfig], AfterValidator(_judge_names)]


class GoldJudgeConfig(JudgeConfig):
    """A judge that scores training episodes beside the training judge and never trains: the gap
    between the two rewards is what the policy learned that the gold judge does not reward."""

    share: float = Field(
        1.0, gt=0, le=1, description="share of judged training episodes it scores (a hash of the clock picks them)"
    )


class ScheduleSpec(PluginSpec):
    """The drift schedule (its args are checked given the budget: positions are fractions of it,
    or episodes with `unit: episodes`). On the simulated clock (`clock: sim_seconds`) the budget
    is `horizon_s` simulated seconds: positions are fractions of it, or seconds with `unit: seconds`."""

    kind: ClassVar[str] = "schedule"
    type: str = "piecewise"
    clock: Literal["episodes", "sim_seconds"] = Field(
        "episodes",
        description="what the schedule's positions count: judged episodes, or simulated seconds "
        "(runtime.kind: simulated only; each arm x seed then switches at its own episode)",
    )
    horizon_s: int | None = Field(
        None, gt=0, description="with clock: sim_seconds, the simulated seconds that fractions are fractions of"
    )

    @model_validator(mode="after")
    def _horizon(self) -> ScheduleSpec:
        if self.clock == "sim_seconds" and self.horizon_s is None:
            raise ValueError("schedule.horizon_s: clock: sim_seconds needs the horizon its positions are fractions of")
        if self.clock == "episodes" and self.horizon_s is not None:
            raise ValueError("schedule.horizon_s: only with clock: sim_seconds (episode positions use budget.episodes)")
        unit = self.args.get("unit")
        if (unit == "seconds") != (self.clock == "sim_seconds") and unit in ("seconds", "episodes"):
            raise ValueError(f"schedule.args.unit: {unit} does not go with schedule.clock: {self.clock}")
        return self


class EngineConfig(PluginSpec):
    """The rollout engine: a registered name (`hf`, `vllm`) or an import path."""

    kind: ClassVar[str] = "engine"
    type: str = "hf"
    mismatch: bool | None = Field(
        default=None,
        description=(
            "mismatch_* columns in updates.parquet (engine vs trainer log-probs, one no-grad forward per update); "
            "default: on for every engine but hf, whose log-probs are the trainer's own code"
        ),
    )

    @property
    def measure_mismatch(self) -> bool:
        return self.mismatch if self.mismatch is not None else self.type != "hf"


class EnvConfig(PluginSpec):
    """The environment: a registered name (`style_shift`, `revision`) or an import path to any
    class or factory that gives an object with testbed.protocols.Env's methods."""

    kind: ClassVar[str] = "env"
    type: str = "style_shift"

    def settings(self) -> Any:
        """The validated args (the env's Config), or None for an env without one."""
        config = registry.config_of(self.load())
        return config.model_validate(self.args) if config is not None else None


# ----------------------------------------------------------------------------------------------
# The spellings before `type:`/`args:`, refused with the new one


SECTIONS: dict[str, type[BaseModel]] = {
    "judge": JudgeConfig,
    "gold_judge": GoldJudgeConfig,
    "schedule": ScheduleSpec,
    "engine": EngineConfig,
    "env": EnvConfig,
}
OLD_KEYS = {
    "judge": ("class", "name"),
    "gold_judge": ("class", "name"),
    "schedule": ("kind",),
    "engine": ("name",),
    "env": ("name",),
}
OWN_KEYS = {"gold_judge": ("share",), "engine": ("mismatch",)}  # settings of the section, not of the plugin


def old_spellings(data: dict[str, Any]) -> list[str]:
    """Each key written the way scenarios were before `type:`/`args:`, with what to write now."""
    problems = []
    for section in SECTIONS:
        value = data.get(section)
        if isinstance(value, dict):
            problems += _old_section(section, value)
    arms = data.get("arms")
    for i, arm in enumerate(arms if isinstance(arms, list) else []):
        if isinstance(arm, dict) and "trainer" in arm:
            args = _args_text(list(arm.get("args") or {}) if isinstance(arm.get("args"), dict) else [])
            problems.append(
                f"arms.{i}.trainer: renamed: write `{{name: {arm.get('name', '...')}, "
                f"type: {_scalar(arm['trainer'])}, args: {args}}}`"
            )
    return problems


def _old_section(section: str, value: dict[str, Any]) -> list[str]:
    old = [k for k in OLD_KEYS[section] if k in value]
    # a schedule's own keys used to sit beside `kind`; every other section already had `args`
    moved = [k for k in value if section == "schedule" and k not in ("type", "args", "clock", "horizon_s", *old)]
    if not old and not moved:
        return []
    impl = value.get("type") or next((value[k] for k in old), None) or SECTIONS[section].model_fields["type"].default
    args = list(value.get("args") or {}) if isinstance(value.get("args"), dict) else []
    own = "".join(f", {k}: {_scalar(value[k])}" for k in OWN_KEYS.get(section, ()) if k in value)
    spelling = f"`{section}: {{type: {_scalar(impl)}, args: {_args_text(list(dict.fromkeys(args + moved)))}{own}}}`"
    return [f"{section}.{k}: renamed: write {spelling}" for k in old] + [
        f"{section}.{k}: moved into args: write {spelling}" for k in moved
    ]


def _args_text(keys: list[str]) -> str:
    return "{" + ", ".join(f"{clip(str(k), 40)}: ..." for k in keys) + "}" if keys else "{...}"


def _scalar(value: Any) -> str:
    text = clip(str(value), 80)
    return f'"{text}"' if ":" in text else text
