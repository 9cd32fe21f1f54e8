"""The scenario schema: a YAML file names the world, policy, judge, drift schedule, arms and seeds.

Every mistake is reported with the file, the field's dotted path and what was expected, before
any training starts. Fractions (phase starts, windows, periods) are fractions of the episode
budget, so a scenario keeps its shape when the budget changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator

from testbed import registry
from testbed.scenario.errors import format_validation_error
from testbed.scenario.loading import ScenarioError, apply_override, clip, placed_under, read_scenario_file
from testbed.scenario.plugins import (
    EngineConfig,
    EnvConfig,
    GoldJudgeConfig,
    JudgeConfig,
    NamedJudges,
    ScheduleSpec,
    Strict,
    old_spellings,
)
from testbed.scenario.run_sections import BudgetConfig, EvalConfig, OutputConfig, ReliabilityConfig
from testbed.scenario.sharding import FSDPConfig, LearnerStrategy
from testbed.scenario.simulation import SimulationConfig
from testbed.scenario.world_policy import PolicyConfig, SamplingConfig, Seed, SFTConfig, WorldConfig
from testbed.tracking.config import TrackingConfig

# the sections defined in world_policy.py and run_sections.py are named here too: `from
# testbed.scenario.schema import PolicyConfig` is how plugins and notebooks have always imported them
__all__ = [
    "ArmConfig",
    "BudgetConfig",
    "EvalConfig",
    "OutputConfig",
    "PolicyConfig",
    "ReliabilityConfig",
    "RuntimeConfig",
    "SFTConfig",
    "SamplingConfig",
    "Scenario",
    "ScenarioError",
    "WorldConfig",
    "apply_override",
    "load_scenario",
    "parse_scenario",
]


class ArmConfig(Strict):
    """One arm: its label `name`, the trainer `type` names (a registered name or an import path)
    and the trainer's `args`, checked by its Config in parse_scenario."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    type: str
    args: dict[str, Any] = Field(default_factory=dict)
    runtime: dict[str, Any] = Field(default_factory=dict, description="this arm's overrides of the scenario's runtime")
    env: dict[str, Any] = Field(default_factory=dict, description="this arm's overrides of the scenario's env.args")

    @field_validator("type")
    @classmethod
    def _known_trainer(cls, name: str) -> str:
        registry.resolve("trainer", name)
        return name

    def trainer_class(self) -> Any:
        """The trainer's class or factory."""
        return registry.load("trainer", self.type)


class RuntimeConfig(Strict):
    """Where the loop runs. `sync`: one process, deterministic per seed (the reference). `ray`:
    rollout actors generate continuously while a learner trains (testbed/runtimes/ray); with one
    rollout worker and `max_staleness: 0` it writes what `sync` writes. `simulated`: one process
    that models an asynchronous cluster in simulated time (`simulation`, testbed/runtimes/simulated)."""

    kind: Literal["sync", "ray", "simulated"] = "sync"
    simulation: SimulationConfig = Field(
        default_factory=SimulationConfig, description="the modelled cluster (runtime.kind: simulated)"
    )
    rollout_workers: int = Field(
        default=1, ge=1, description="rollout actors, each an engine with its own copy of the policy"
    )
    learner_workers: int = Field(default=1, ge=1, description="data-parallel learners (torch.distributed, gloo on CPU)")
    learner_strategy: LearnerStrategy = Field(
        default="replicate", description="replicate: DDP, a full copy per learner; fsdp: FSDP2, each learner holds 1/W"
    )
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig, description="learner_strategy fsdp's settings")
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="backpropagate each learner's batch in micro-batches of at most this many tokens",
    )
    device_memory_gb: float | None = Field(
        default=None, gt=0, description="memory per device the plan assumes where there is no CUDA (else the host's)"
    )
    max_staleness: int | None = Field(
        default=None,
        ge=0,
        description="policy versions an episode may lag when trained; older ones are "
        "dropped at dequeue, on either runtime (unset: 0 on ray, no bound on sync)",
    )
    queue_size: int | None = Field(
        default=None,
        ge=1,
        description="judged episodes waiting for the learner, at most (default: (max_staleness + 2) x batch)",
    )
    address: str | None = Field(
        default=None, description="an existing Ray cluster (else RAY_ADDRESS, else a local one)"
    )
    torch_threads: int = Field(
        default=1, ge=1, description="torch threads per process; 1: the matmuls are tiny, more only synchronise"
    )
    actor_cpus: float = Field(default=0.5, gt=0, description="CPUs Ray reserves per actor")
    parallel_arms: bool = Field(default=False, description="run arms x seeds side by side as Ray tasks")
    task_cpus: float = Field(
        default=1.0, gt=0, description="CPUs Ray reserves per arm x seed task (parallel_arms); 1: one task per core"
    )
    device: str = Field(
        default="cpu",
        pattern=r"^(cpu|auto|cuda(:[0-9]+)?)$",
        description=(
            "where each arm's policy, its reference and critic, and the batches live: cpu, cuda, "
            "cuda:N, or auto (cuda if seen)"
        ),
    )
    actor_gpus: float | None = Field(
        default=None,
        ge=0,
        description="GPUs Ray reserves per rollout actor and learner "
        "(default: 1 on cuda, else 0; a fraction shares one; testbed.device.gpus)",
    )
    task_gpus: float | None = Field(
        default=None, ge=0, description="GPUs Ray reserves per arm x seed task (parallel_arms; default as actor_gpus)"
    )

    def staleness_limit(self) -> int | None:
        """The bound applied: `max_staleness`; unset, 0 on ray (its issue gate needs one), none on sync."""
        return 0 if self.max_staleness is None and self.kind == "ray" else self.max_staleness


class Scenario(Strict):
    _schedule: Any = PrivateAttr(None)
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = ""
    world: WorldConfig = Field(default_factory=WorldConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    gold_judge: GoldJudgeConfig | None = None
    judges: NamedJudges = Field(default_factory=dict, description="more judges the schedule may switch to, by name")
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
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)  # trackers mirror the rows (testbed/tracking)
    numerics: Literal["portable", "native"] = Field(
        "portable",
        description="CPU kernels: portable (the x86-64 baseline kernels: the same rows for a seed on "
        "every x86-64 processor) or native (the fastest kernels: the same rows on the same processor only); "
        "testbed/cpu_numerics.py",
    )

    def runtime_for(self, arm: ArmConfig) -> RuntimeConfig:
        """The scenario's runtime with the arm's own overrides (e.g. a max_staleness per arm)."""
        return RuntimeConfig.model_validate({**self.runtime.model_dump(), **arm.runtime})

    def env_for(self, arm: ArmConfig) -> EnvConfig:
        """The scenario's env with the arm's own overrides of its args (e.g. the feedback setting)."""
        return EnvConfig(type=self.env.type, args={**self.env.args, **arm.env}) if arm.env else self.env

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        for i, arm in enumerate(self.arms):
            try:
                self.runtime_for(arm)
            except ValidationError as exc:
                raise ValueError(f"arms.{i}.runtime: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None
            env = self.env_for(arm)
            sft_key = getattr(env.load(), "sft_key", None)
            if (
                arm.env
                and sft_key is not None
                and _settled(env)
                and _settled(self.env)
                and sft_key(env.settings()) != sft_key(self.env.settings())
            ):
                raise ValueError(
                    f"arms.{i}.env: {sorted(arm.env)} would change what the shared SFT policy learns "
                    f"({sft_key(self.env.settings())}); set it in the scenario's env.args instead"
                )
        context = getattr(self.env.load(), "context_tokens", None)
        tokens = (
            context(self.env.settings(), self.sampling.max_new_tokens)
            if context is not None and _settled(self.env)
            else 0
        )
        if tokens > self.policy.max_positions:
            raise ValueError(
                f"env {self.env.type}: an episode may reach {tokens} "
                f"tokens (its turns of sampling.max_new_tokens={self.sampling.max_new_tokens} and its notes), over "
                f"policy.max_positions={self.policy.max_positions}: raise policy.max_positions"
            )
        self._clock_fits_runtime()
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be unique, got {names}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be unique, got {self.seeds}")
        return self

    def _clock_fits_runtime(self) -> None:
        """A schedule in simulated seconds needs the simulated clock on every arm."""
        if self.schedule.clock != "sim_seconds":
            return
        for i, arm in enumerate(self.arms):
            kind = self.runtime_for(arm).kind
            if kind != "simulated":
                raise ValueError(
                    f"schedule.clock: sim_seconds needs runtime.kind: simulated, but arm '{arm.name}' (arms.{i}) "
                    f"runs on runtime.kind: {kind}, which has no simulated time (use clock: episodes there)"
                )

    def schedule_object(self) -> Any:
        """The drift schedule, built (and checked against the world) when the scenario loaded."""
        if self._schedule is None:
            self._schedule = _build_schedule(self, "<scenario>")
        return self._schedule

    def digest(self) -> str:
        return hashlib.sha256(
            json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True).encode()
        ).hexdigest()[:12]


# ----------------------------------------------------------------------------------------------
# Loading, overrides and each plugin's args (readable errors: testbed/scenario/errors.py)


def _settled(env: EnvConfig) -> bool:
    """Whether the env's args pass its Config (if not, parse_scenario names the problem)."""
    try:
        env.settings()
    except ValidationError:
        return False
    return True


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping of keys to values, got {type(data).__name__}")
    if "grid" in data and "scenario" in data:
        raise ScenarioError(
            f"{source} is a sweep file (a base scenario and a grid), not a scenario: run it with "
            f"python -m testbed.sweep {source}"
        )
    old = old_spellings(data)
    if old:
        raise ScenarioError(
            f"{source}: written in an old spelling (every plugin is now `type:` and `args:`)\n"
            + "\n".join(f"  {line}" for line in old)
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(exc, Scenario, source)) from None
    # Every plugin's args are checked now, by one rule, so a typo fails here, not mid-run.
    problems = _plugin_problems(scenario, source)
    problems += [line for i, arm in enumerate(scenario.arms) for line in _trainer_problems(i, arm, scenario, source)]
    if problems:
        raise ScenarioError(f"{source}: invalid plugin arguments\n" + "\n".join(problems))
    _check_budget(scenario, source)
    scenario._schedule = _build_schedule(scenario, source)
    return scenario


def _args_problems(prefix: str, kind: str, obj: Any, args: dict[str, Any], source: str) -> tuple[list[str], Any]:
    """registry.check_args, every problem on a line named by its path (`prefix` + the field);
    also the validated Config (None without one, or on a problem)."""
    try:
        return [], registry.check_args(kind, obj, args)
    except ValidationError as exc:
        body = format_validation_error(exc, registry.config_of(obj) or BaseModel, source).splitlines()[1:]
        return [placed_under(prefix.rstrip("."), line) for line in body], None
    except ValueError as exc:  # "args.KEY: ..." (a key the signature does not take) or "args: ..."
        text = str(exc)
        where = (
            prefix + text.removeprefix("args.")
            if text.startswith("args.")
            else prefix.rstrip(".") + text.removeprefix("args")
        )
        return [f"  {where}"], None


def _plugin_problems(scenario: Scenario, source: str) -> list[str]:
    """The judges', engine's and env's args (an arm's env overrides with them), each by its Config
    or signature; a ready-made judge (a function of one request) takes none."""
    specs = [
        ("judge.args.", scenario.judge),
        ("gold_judge.args.", scenario.gold_judge),
        *((f"judges.{name}.args.", config) for name, config in scenario.judges.items()),
        ("engine.args.", scenario.engine),
        ("env.args.", scenario.env),
    ]
    specs += [(f"arms.{i}.env.", scenario.env_for(arm)) for i, arm in enumerate(scenario.arms) if arm.env]
    problems: list[str] = []
    for prefix, spec in specs:
        obj = None if spec is None else spec.load()  # no gold judge: nothing to check
        if spec is None or obj is None or (spec.kind == "judge" and not registry.is_factory(obj, spec.args)):
            continue
        problems += _args_problems(prefix, spec.kind, obj, spec.args, source)[0]
    return problems


def _trainer_problems(i: int, arm: ArmConfig, scenario: Scenario, source: str) -> list[str]:
    """arms.i's args checked as every plugin's are, and against the budget."""
    try:
        trainer = arm.trainer_class()
    except (registry.RegistryError, ImportError, TypeError) as exc:  # TypeError: raised by a module as it imports
        return [f"  arms.{i}.type: {clip(str(exc), 300)}"]
    problems, config = _args_problems(f"arms.{i}.args.", "trainer", trainer, arm.args, source)
    per_update = getattr(config, "episodes_per_update", None)  # a property of the trainer's Config
    if per_update is not None and per_update > scenario.budget.episodes:
        problems.append(
            f"  arms.{i}.args: one update needs {per_update} episodes but budget.episodes is "
            f"{scenario.budget.episodes}; the arm would never train"
        )
    return problems


def _build_schedule(scenario: Scenario, source: str) -> Any:
    """Build the scenario's schedule through the registry and check it against the world: its
    args by its own Config (given the budget, for `unit: episodes`), then every target it gives
    over the budget."""
    from testbed.envs.schedules import build_schedule, check_schedule, style_fields

    spec, budget = scenario.schedule, scenario.budget.episodes
    timed = spec.clock == "sim_seconds"
    if timed:  # the wrapped schedule's clock is one simulated second, its budget the horizon
        assert spec.horizon_s is not None  # ScheduleSpec requires it
        budget = spec.horizon_s
    config_cls = None
    try:
        schedule_obj = spec.load()
        config_cls = registry.config_of(schedule_obj)
        if config_cls is not None:  # name a style the world lacks by its field, before building
            config = config_cls.model_validate(spec.args, context={"budget": budget})
            for where, style in style_fields(config.model_dump(), "schedule.args"):
                if style not in scenario.world.styles:
                    raise ValueError(
                        f"{where}: style '{style}' is not in world.styles ({', '.join(scenario.world.styles)})"
                    )
        schedule = build_schedule(spec.type, spec.args, budget=budget, archetypes=scenario.world.archetypes)
        check_schedule(schedule, budget, scenario.world.styles, ["default", *scenario.judges])
        if timed:
            from testbed.envs.schedules.sim_time import SimTimeSchedule

            schedule = SimTimeSchedule(schedule)
    except ValidationError as exc:
        body = format_validation_error(exc, config_cls or BaseModel, source).splitlines()[1:]
        raise ScenarioError(
            f"{source}: invalid schedule ({spec.type})\n"
            + "\n".join(line.replace("  ", "  schedule.args.", 1) for line in body)
        ) from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    return schedule


def _check_budget(scenario: Scenario, source: str) -> None:
    """Budgets that validate field by field but cannot run together."""
    from testbed.world import prompts  # the world builds its prompt lists lazily

    heldout = len(prompts("heldout"))
    if scenario.eval.prompts > heldout:
        raise ScenarioError(
            f"{source}: eval.prompts is {scenario.eval.prompts} but the world has only {heldout} held-out prompts"
        )


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    data = read_scenario_file(Path(path))
    data = data if data is not None else {}
    for assignment in (overrides or []) if isinstance(data, dict) else []:
        apply_override(data, assignment)
    return parse_scenario(data, str(path))
