"""The scenario schema: a YAML file names the world, policy, judge, drift schedule, arms and seeds.

Every mistake is reported with the file, the field's dotted path and what was expected, before
any training starts. Fractions (phase starts, windows, periods) are fractions of the episode
budget, so a scenario keeps its shape when the budget changes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from testbed import registry
from testbed.paths import check_directory
from testbed.scenario.loading import ScenarioError, apply_override, clip, read_scenario_file
from testbed.world import STYLES
from testbed.world.rules import HardTopics, NoisyTopics, WorldRules

MAX_PROBLEMS = 20  # validation problems listed in one message

__all__ = ["Scenario", "ScenarioError", "apply_override", "load_scenario", "parse_scenario"]

# np.random.seed (the loop seeds numpy per arm x seed) takes only this range; outside it a run crashes
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


# The plugin sections (judge, gold judge, schedule, engine, env) live in their own module.
from testbed.scenario.plugins import EngineConfig, EnvConfig, GoldJudgeConfig, JudgeConfig, ScheduleSpec, Strict  # noqa: E402,F401


class WorldConfig(Strict):
    styles: list[str] = Field(default_factory=lambda: list(STYLES), min_length=1)
    archetypes: list[str] = Field(
        default_factory=lambda: ["academic", "cute", "chuunibyou", "classical"], min_length=1,
        description="the styles a prompt may offer as candidates by default",
    )
    # What a baseline can know (testbed/world/rules.py; all off by default)
    hard_topics: HardTopics = Field(default_factory=HardTopics)
    noisy_topics: NoisyTopics = Field(default_factory=NoisyTopics)
    candidate_change_share: float = Field(1.0, ge=0, le=1, description="share of prompt forms whose candidate list follows the schedule")

    def rules(self) -> WorldRules:
        return WorldRules(hard_topics=self.hard_topics, noisy_topics=self.noisy_topics)

    @field_validator("styles", "archetypes")
    @classmethod
    def _known_styles(cls, styles: list[str]) -> list[str]:
        for i, s in enumerate(styles):
            if s not in STYLES:
                raise ValueError(f"unknown style '{clip(s, 80)}' (the world has: {', '.join(STYLES)})")
            if s in styles[:i]:
                raise ValueError(f"'{s}' is listed twice")
        return styles


class SFTConfig(Strict):
    steps: int = Field(400, ge=0)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-2, gt=0)
    corpus_size: int = Field(20_000, ge=1)
    # Acceptance: keep training (in rounds of `steps`) until every archetype is written and
    # quality is high, as judged by the embedded rubric on held-out prompts.
    min_style_share: float = Field(0.10, ge=0, le=1)
    min_quality: float = Field(0.80, ge=0, le=1)
    eval_samples: int = Field(256, ge=1)
    max_rounds: int = Field(3, ge=1)
    seed: Seed = 0
    per_seed: bool = Field(False, description="each run seed its own SFT policy (SFT seed = seed + the run's seed), so intervals cover the starting policy")


class PolicyConfig(Strict):
    checkpoint: str | None = Field(None, description="a real HF checkpoint directory replaces the built model")
    hidden_size: int = Field(64, ge=8)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int = Field(2, ge=1)
    num_experts: int = Field(8, ge=1)
    top_k: int = Field(2, ge=1)
    expert_size: int = Field(64, ge=1, description="moe_intermediate_size")
    max_positions: int = Field(128, ge=16)
    sft: SFTConfig = Field(default_factory=SFTConfig)

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_directory(cls, path: str | None) -> str | None:
        """A missing directory or one with no config.json is named now, not after start-up."""
        if path is not None:
            try:
                check_directory(path)
            except FileNotFoundError as exc:
                raise ValueError(str(exc).removeprefix("policy.checkpoint: ")) from None
        return path

    @model_validator(mode="after")
    def _shapes(self) -> PolicyConfig:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed num_experts ({self.num_experts})")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})")
        return self


class SamplingConfig(Strict):
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(48, ge=1)


class ArmConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    trainer: str
    args: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, Any] = Field(default_factory=dict, description="this arm's overrides of the scenario's runtime")
    env: dict[str, Any] = Field(default_factory=dict, description="this arm's overrides of the scenario's env.args")

    @field_validator("trainer")
    @classmethod
    def _known_trainer(cls, name: str) -> str:
        registry.resolve("trainer", name)
        return name

    def trainer_class(self) -> type:
        return registry.load("trainer", self.trainer)


class RuntimeConfig(Strict):
    """Where the loop runs. `sync`: one process, deterministic per seed (the reference). `ray`:
    rollout actors generate continuously while a learner trains (testbed/runtimes/ray); with one
    rollout worker and `max_staleness: 0` it writes what `sync` writes."""

    kind: Literal["sync", "ray"] = "sync"
    rollout_workers: int = Field(1, ge=1, description="rollout actors, each an engine with its own copy of the policy")
    learner_workers: int = Field(1, ge=1, description="data-parallel learners (torch.distributed, gloo on CPU)")
    max_staleness: int = Field(0, ge=0, description="policy versions an episode may lag when trained; older ones are dropped")
    queue_size: int | None = Field(None, ge=1, description="judged episodes waiting for the learner, at most (default: (max_staleness + 2) x batch)")
    address: str | None = Field(None, description="an existing Ray cluster (else RAY_ADDRESS, else a local one)")
    torch_threads: int = Field(1, ge=1, description="torch threads per process; 1: the matmuls are tiny, more only synchronise")
    actor_cpus: float = Field(0.5, gt=0, description="CPUs Ray reserves per actor")
    parallel_arms: bool = Field(False, description="run arms x seeds side by side as Ray tasks")
    task_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves per arm x seed task (parallel_arms); 1: one task per core")
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$", description=(
        "where each arm's policy, its reference and critic, and the batches live: cpu, cuda, cuda:N, or auto (cuda if seen)"))
    actor_gpus: float | None = Field(None, ge=0, description="GPUs Ray reserves per rollout actor and learner "
                                     "(default: 1 on cuda, else 0; a fraction shares one; testbed.device.gpus)")
    task_gpus: float | None = Field(None, ge=0, description="GPUs Ray reserves per arm x seed task (parallel_arms; default as actor_gpus)")


class BudgetConfig(Strict):
    episodes: int = Field(gt=0, description="judged training episodes per arm x seed")


class EvalConfig(Strict):
    every: int = Field(200, gt=0, description="episodes between held-out evaluations")
    prompts: int = Field(64, gt=0, description="held-out prompts per evaluation")
    reference_samples: int = Field(4, ge=0, description="samples per held-out prompt and phase of the starting policy "
                                   "told the target: the arms' common reference (testbed/runtimes/reference_policy.py); 0 = none")


class OutputConfig(Strict):
    dir: str = "runs"
    flush_rows: int = Field(512, gt=0, description="buffered rows per table before a durable flush")
    flush_seconds: float = Field(30.0, gt=0, description="...or this long since the last flush")


class ReliabilityConfig(Strict):
    checkpoint_every: int = Field(20, gt=0, description="policy updates between checkpoints (also one at the start and end of each arm x seed)")
    judge_failure_budget: int = Field(512, gt=0, description="failed judge calls in a row before the run stops with a resumable checkpoint")
    max_nonfinite_updates: int = Field(5, gt=0, description="updates in a row skipped for a NaN/inf loss or gradient before the run stops")


class Scenario(Strict):
    _schedule: Any = PrivateAttr(None)
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    world: WorldConfig = Field(default_factory=WorldConfig)
    judge: JudgeConfig = Field(default_factory=lambda: JudgeConfig(name="rubric"))
    gold_judge: GoldJudgeConfig | None = None
    schedule: ScheduleSpec
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    arms: list[ArmConfig] = Field(min_length=1)
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1)
    budget: BudgetConfig
    eval: EvalConfig = Field(default_factory=EvalConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    reliability: ReliabilityConfig = Field(default_factory=ReliabilityConfig)
    numerics: Literal["portable", "native"] = Field(
        "portable", description="CPU kernels: portable (the x86-64 baseline kernels: the same rows for a seed on "
        "every x86-64 processor) or native (the fastest kernels: the same rows on the same processor only); "
        "testbed/cpu_numerics.py")

    def runtime_for(self, arm: ArmConfig) -> RuntimeConfig:
        """The scenario's runtime with the arm's own overrides (e.g. a max_staleness per arm)."""
        return RuntimeConfig.model_validate({**self.runtime.model_dump(), **arm.runtime})

    def env_for(self, arm: ArmConfig) -> EnvConfig:
        """The scenario's env with the arm's own overrides of its args (e.g. the feedback setting)."""
        return EnvConfig(name=self.env.name, args={**self.env.args, **arm.env}) if arm.env else self.env

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        for i, arm in enumerate(self.arms):
            try:
                self.runtime_for(arm)
            except ValidationError as exc:
                raise ValueError(f"arms.{i}.runtime: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None
            try:
                env = self.env_for(arm)
            except (ValidationError, ValueError) as exc:
                raise ValueError(f"arms.{i}.env: {exc.errors()[0]['msg'] if isinstance(exc, ValidationError) else exc}") from None
            sft_key = getattr(registry.load("env", env.name), "sft_key", None)
            if arm.env and sft_key is not None and sft_key(env.settings()) != sft_key(self.env.settings()):
                raise ValueError(f"arms.{i}.env: {sorted(arm.env)} would change what the shared SFT policy learns "
                                 f"({sft_key(self.env.settings())}); set it in the scenario's env.args instead")
        context = getattr(registry.load("env", self.env.name), "context_tokens", None)
        if context is not None and context(self.env.settings(), self.sampling.max_new_tokens) > self.policy.max_positions:
            raise ValueError(f"env {self.env.name}: an episode may reach {context(self.env.settings(), self.sampling.max_new_tokens)} "
                             f"tokens (its turns of sampling.max_new_tokens={self.sampling.max_new_tokens} and its notes), over "
                             f"policy.max_positions={self.policy.max_positions}: raise policy.max_positions")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be unique, got {self.seeds}")
        return self

    def schedule_object(self) -> Any:
        """The drift schedule, built (and checked against the world) when the scenario loaded."""
        if self._schedule is None:
            self._schedule = _build_schedule(self, "<scenario>")
        return self._schedule

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------------------------
# Loading, overrides and readable errors


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
            if "input" in err and err["type"] not in ("value_error", "assertion_error") and not isinstance(err["input"], dict):
                msg += f" (got {clip(repr(err['input']), 100)})"
        lines.append(f"  {where}: {msg}")
    if len(errors) > MAX_PROBLEMS:
        lines.append(f"  ... and {len(errors) - MAX_PROBLEMS} more problems")
    return "\n".join(lines)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping of keys to values, got {type(data).__name__}")
    if "grid" in data and "scenario" in data:
        raise ScenarioError(f"{source} is a sweep file (a base scenario and a grid), not a scenario: run it with "
                            f"python -m testbed.sweep {source}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, Scenario, source)) from None
    # Each trainer validates its own arguments, so a typo in `arms[i].args` fails here, not mid-run.
    problems = []
    for i, arm in enumerate(scenario.arms):
        try:
            config_cls = getattr(arm.trainer_class(), "Config", None)
        except (registry.RegistryError, ImportError, TypeError) as exc:  # TypeError: a relative module path
            problems.append(f"  arms.{i}.trainer: {clip(str(exc), 300)}")
            continue
        if config_cls is None:
            continue
        try:
            config = config_cls.model_validate(arm.args)
        except ValidationError as exc:
            body = format_validation_error(exc, config_cls, source).splitlines()[1:]
            problems += [line.replace("  ", f"  arms.{i}.args.", 1) for line in body]
            continue
        per_update = getattr(config, "episodes_per_update", None)  # a property of the trainer's Config
        if per_update is not None and per_update > scenario.budget.episodes:
            problems.append(f"  arms.{i}.args: one update needs {per_update} episodes but budget.episodes is "
                            f"{scenario.budget.episodes}; the arm would never train")
    if problems:
        raise ScenarioError(f"{source}: invalid trainer arguments\n" + "\n".join(problems))
    _check_budget(scenario, source)
    scenario._schedule = _build_schedule(scenario, source)
    return scenario


def _build_schedule(scenario: Scenario, source: str) -> Any:
    """Build the scenario's schedule through the registry and check it against the world: its
    keys by its own Config, then every target it gives over the budget."""
    from testbed.envs.schedules import build_schedule, check_schedule, style_fields

    spec, budget = scenario.schedule, scenario.budget.episodes
    try:
        schedule_cls = registry.load("schedule", spec.kind)
        config_cls = getattr(schedule_cls, "Config", None)
        if config_cls is not None:  # name a style the world lacks by its field, before building
            for where, style in style_fields(config_cls.model_validate(spec.args).model_dump()):
                if style not in scenario.world.styles:
                    raise ValueError(f"{where}: style '{style}' is not in world.styles ({', '.join(scenario.world.styles)})")
        schedule = build_schedule(spec.kind, spec.args, budget=budget, archetypes=scenario.world.archetypes)
        check_schedule(schedule, budget, scenario.world.styles)
    except ValidationError as exc:
        body = format_validation_error(exc, config_cls, source).splitlines()[1:]
        raise ScenarioError(f"{source}: invalid schedule ({spec.kind})\n" + "\n".join(
            line.replace("  ", "  schedule.", 1) for line in body)) from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    return schedule


def _check_budget(scenario: Scenario, source: str) -> None:
    """Budgets that validate field by field but cannot run together."""
    from testbed.world import prompts  # the world builds its prompt lists lazily

    budget = scenario.budget.episodes
    heldout = len(prompts("heldout"))
    if scenario.eval.prompts > heldout:
        raise ScenarioError(f"{source}: eval.prompts is {scenario.eval.prompts} but the world has only {heldout} held-out prompts")


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    path = Path(path)
    data = read_scenario_file(path)
    data = data if data is not None else {}
    for assignment in overrides or []:
        if not isinstance(data, dict):
            break
        apply_override(data, assignment)
    return parse_scenario(data, str(path))
