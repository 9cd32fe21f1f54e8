"""The plan of a run, for `python -m testbed.run SCENARIO --dry-run`: what would run, on what, and
how many judge calls it would cost, without training, writing a run directory or touching a cache.

The arithmetic is pure and lives in testbed/cli/plan_arithmetic.py (`evaluations`, `gold_episodes`,
`judge_calls`, `active_parameters`, `sft_acceptance_samples`, `public_args`); `make_plan` gathers its
inputs from a validated scenario, building the policy, critics and references on torch's meta device
(shapes, no memory) and looking, never writing, into the cache. `testbed/cli/plan_print.py` prints it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from testbed import registry
from testbed.cli.memory_plan import scenario_memory
from testbed.cli.plan_arithmetic import (
    ArmShape,
    active_parameters,
    episodes_per_round,
    evaluations,
    judge_calls,
    public_args,
    sft_acceptance_samples,
    unset_env_vars,
)
from testbed.judging.build import check_judge
from testbed.models.modules import moe_shape
from testbed.scenario.schema import GoldJudgeConfig, Scenario, ScenarioError, WorldConfig

# The modules that load torch or transformers (the models, the runtimes' warm-up keys, the device check)
# are imported inside the functions that need them: `testbed run --help` and the CLI's argument
# errors must not wait for them (tests/test_run_dirs.py).

MAX_PHASES = 12  # target segments listed; a gradual schedule's windows would make hundreds


# -- gathering the inputs from a scenario ---------------------------------------------------------


def make_plan(
    scenario: Scenario, source: str = "", out_dir: str | None = None, run_name: str | None = None
) -> dict[str, Any]:
    """The plan of `scenario` as plain data (what `--dry-run --json` prints). Raises ScenarioError
    for what a run would only find later (a checkpoint that is not there, a trainer that refuses
    its arguments when built, a run directory that exists)."""
    import torch

    schedule = scenario.schedule_object()
    with torch.random.fork_rng(devices=[]):  # building the policy seeds torch: leave the caller's RNG alone
        policy, model, pad_id = build_policy_shape(scenario)
        starting, seed_keys = starting_plan(scenario)
        trainers = [build_trainer(scenario, i, model, pad_id) for i in range(len(scenario.arms))]
        arms = [arm_plan(scenario, i, trainer, schedule, seed_keys) for i, trainer in enumerate(trainers)]
    claim_warmups(arms)
    judges = judges_plan(scenario)
    shapes = [
        ArmShape(a["name"], a["episodes_per_round"], a["max_turns"], a["warmup"]["runs"], a["warmup"]["samples"])
        for a in arms
    ]
    budget, seeds = scenario.budget.episodes, len(scenario.seeds)
    gold_share = scenario.gold_judge.share if scenario.gold_judge else None
    return {
        "scenario": {
            "name": scenario.name,
            "source": source,
            "description": scenario.description,
            "digest": scenario.digest(),
        },
        "run_directory": run_directory(scenario, out_dir, run_name),
        "policy": policy,
        "starting_policies": starting,
        "arms": arms,
        **judges,
        "schedule": schedule_plan(scenario, schedule),
        "runtime": runtime_plan(scenario),
        "memory": scenario_memory(scenario, model, trainers),
        "seeds": list(scenario.seeds),
        "episodes": {
            "per_arm_seed": budget,
            "arm_seeds": len(arms) * seeds,
            "total": budget * len(arms) * seeds,
            "eval": {
                "every": scenario.eval.every,
                "prompts": scenario.eval.prompts,
                "per_arm_seed": {
                    a.name: evaluations(budget, a.per_round, scenario.eval.every) * scenario.eval.prompts
                    for a in shapes
                },
            },
        },
        "judge_calls": judge_calls(budget, seeds, shapes, scenario.eval.every, scenario.eval.prompts, gold_share),
        "warnings": judges.pop("warnings") + device_problems(scenario),
    }


def build_policy_shape(scenario: Scenario) -> tuple[dict[str, Any], Any, int]:
    """The policy on the meta device (its shapes only), its description, and the pad id trainers need."""
    import torch

    cfg = scenario.policy
    if cfg.checkpoint:
        from transformers import AutoConfig, AutoModelForCausalLM

        directory = Path(cfg.checkpoint)
        if not directory.is_dir():
            raise ScenarioError(f"policy.checkpoint: no such directory: {directory}")
        try:
            hf = AutoConfig.from_pretrained(directory)
        except (OSError, ValueError) as exc:
            raise ScenarioError(
                f"policy.checkpoint: {directory} is not a model directory transformers reads: {exc}"
            ) from None
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf)
        described: dict[str, Any] = {"checkpoint": str(directory)}
        pad_id = hf.pad_token_id if isinstance(hf.pad_token_id, int) else 0
    else:
        from testbed.models.policy import build_policy
        from testbed.models.sft import tokenizer_and_corpus

        tokenizer, _ = tokenizer_and_corpus(cfg, scenario.world.archetypes, scenario.env)  # the corpus stays unbuilt
        with torch.device("meta"):
            model = build_policy(cfg, tokenizer)
        described = {"shape": cfg.model_dump(exclude={"checkpoint", "sft", "lora"}), "vocab_size": tokenizer.vocab_size}
        pad_id = tokenizer.pad_id
    if cfg.lora is not None:  # its targets checked on the shapes now, not when the arm starts
        from testbed.models.lora import lora_plan

        try:
            described["lora"] = lora_plan(model, cfg.lora)
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
    hf = model.config
    experts, top_k = moe_shape(hf) or (None, None)
    sizes = {name: p.numel() for name, p in model.named_parameters()}
    described.update(
        family=type(model).__name__,
        parameters=sum(sizes.values()),
        num_experts=experts,
        top_k=top_k,
        active_parameters=active_parameters(sizes, experts, top_k),
    )
    return described, model, pad_id


def starting_plan(scenario: Scenario) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Each distinct starting policy (its SFT cache key, whether it is cached, what SFT would cost),
    and seed -> the key its warm-ups are cached under."""
    from testbed.models.sft import EARLY_CHECKS, cache_root, policy_key
    from testbed.runtimes.starting import starting_configs

    configs = starting_configs(scenario)
    archetypes = scenario.world.archetypes
    out: list[dict[str, Any]] = []
    keys: dict[int, str] = {}
    for seed, cfg in configs.items():
        seeds = [seed] if len(configs) > 1 else list(scenario.seeds)
        if cfg.checkpoint:
            key = str(Path(cfg.checkpoint))
            out.append({"seeds": seeds, "checkpoint": key})
        else:
            key = policy_key(cfg, archetypes, scenario.env)
            sft = cfg.sft
            out.append(
                {
                    "seeds": seeds,
                    "sft_seed": sft.seed,
                    "key": key,
                    "cache": str(cache_root() / f"policy-{key}"),
                    "cached": (cache_root() / f"policy-{key}" / "sft_report.json").is_file(),
                    "steps_per_round": sft.steps,
                    "max_rounds": sft.max_rounds,
                    "corpus_size": sft.corpus_size,
                    "acceptance_samples_max": sft_acceptance_samples(
                        sft.steps,
                        sft.eval_samples,
                        len(archetypes) if len(archetypes) > 3 else 1,
                        sft.max_rounds,
                        EARLY_CHECKS,
                    ),
                }
            )
        keys.update(dict.fromkeys(seeds, key))
    return out, keys


def build_trainer(scenario: Scenario, i: int, model: Any, pad_id: int) -> Any:
    """Arm i's trainer, built on the meta policy: the critic and reference it makes, what one update takes."""
    arm = scenario.arms[i]
    try:
        return registry.build(
            arm.trainer_class(), arm.args, model, pad_id=pad_id, temperature=scenario.sampling.temperature, seed=0
        )
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"arms.{i} ({arm.name}): trainer {arm.type} refuses its arguments: {exc}") from None


def arm_plan(scenario: Scenario, i: int, trainer: Any, schedule: Any, seed_keys: dict[int, str]) -> dict[str, Any]:
    """One arm: what its trainer (built on the meta policy) makes and takes per update, and the
    warm-ups it would need, by cache file."""
    from testbed.models.critic import trainable_parameter_counts
    from testbed.runtimes.learn import warmup_cache_key, warmup_cache_path

    arm = scenario.arms[i]
    critic = getattr(trainer, "critic", None)
    counts = trainable_parameter_counts(critic) if critic is not None else None
    ref = getattr(trainer, "reference", None)  # the KL anchor's frozen copy of the starting policy
    reference = getattr(ref, "model", None)
    runtime = scenario.runtime_for(arm)
    samples = int(getattr(trainer, "warmup_samples", 0) or 0)
    files: dict[str, bool] = {}
    if samples > 0:
        for seed in scenario.seeds:
            path = warmup_cache_path(warmup_cache_key(scenario, arm, trainer.warmup_key(), schedule, seed_keys[seed]))
            files.setdefault(str(path), path.is_file())
    settings = scenario.env_for(arm).settings()
    return {
        "name": arm.name,
        "trainer": arm.type,
        "path": registry.resolve("trainer", arm.type),
        "args": public_args(arm.args),
        "episodes_per_update": trainer.episodes_per_update,
        "group_size": trainer.group_size,
        "episodes_per_round": episodes_per_round(trainer.episodes_per_update, trainer.group_size),
        "max_turns": int(getattr(settings, "max_turns", 1) or 1),
        "env": dict(arm.env),
        "runtime": {
            "kind": runtime.kind,
            **({} if runtime.staleness_limit() is None else {"max_staleness": runtime.staleness_limit()}),
            **(
                {"rollout_workers": runtime.rollout_workers, "learner_workers": runtime.learner_workers}
                if runtime.kind == "ray"
                else {}
            ),
        },
        "critic": counts and {**counts, "frozen": counts["total"] - counts["trainable"]},
        "reference": None
        if reference is None
        else {
            "kl_coef": getattr(ref, "coef", None),
            "parameters": sum(p.numel() for p in reference.parameters()),
            "shared": scenario.policy.lora is not None,  # policy.lora: the base under the adapters
        },
        "warmup": {"samples": samples, "files": files, "runs": 0},
    }


def claim_warmups(arms: list[dict[str, Any]]) -> None:
    """Each warm-up not cached is computed by the first arm (in run order) that needs it; the others load it."""
    seen: set[str] = set()
    for arm in arms:
        fresh = [f for f, cached in arm["warmup"]["files"].items() if not cached and f not in seen]
        seen.update(arm["warmup"]["files"])
        arm["warmup"]["runs"] = len(fresh)


def judges_plan(scenario: Scenario) -> dict[str, Any]:
    """The training and gold judges, checked as a run checks them (testbed.judging.build.check_judge),
    with printable args; the world settings that are on; what a real run would stop on."""
    out: dict[str, Any] = {"warnings": []}
    for field, config in (("judge", scenario.judge), ("gold_judge", scenario.gold_judge)):
        if config is None:
            out[field] = None
            continue
        args = public_args(config.args)
        out[field] = {
            "type": config.type,
            "path": config.path,
            "args": args,
            "check": check_judge(config, field),
            **({"share": config.share} if isinstance(config, GoldJudgeConfig) else {}),
        }
        out["warnings"] += unset_env_vars(args, f"{field}.args")
    out["judges"] = {}  # more judges the schedule switches to (judge_at)
    for name, config in scenario.judges.items():
        args = public_args(config.args)
        field = f"judges.{name}"
        out["judges"][name] = {
            "type": config.type,
            "path": config.path,
            "args": args,
            "check": check_judge(config, field),
        }
        out["warnings"] += unset_env_vars(args, f"{field}.args")
    default = WorldConfig().model_dump()
    world = scenario.world.model_dump()
    out["world"] = {k: v for k, v in world.items() if k not in ("styles", "archetypes") and v != default[k]}
    out["world"]["archetypes"] = world["archetypes"]
    out["env"] = {"type": scenario.env.type, "args": public_args(scenario.env.args)}
    return out


def schedule_plan(scenario: Scenario, schedule: Any) -> dict[str, Any]:
    """The target over the budget, in episodes: each stretch with the same style and candidates
    (a schedule in simulated seconds: over its horizon, in seconds; each arm x seed meets its
    switches at its own episode)."""
    budget, unit = scenario.budget.episodes, "episodes"
    if scenario.schedule.clock == "sim_seconds":
        assert scenario.schedule.horizon_s is not None  # ScheduleSpec requires it with this clock
        schedule, budget, unit = schedule.inner, scenario.schedule.horizon_s, "simulated seconds"
    phases: list[dict[str, Any]] = []
    judge_of = judge_labels(schedule)
    for t in range(budget):
        target, judge = schedule.target(t), judge_of(t)
        now = {"style": target.style, "candidates": list(target.candidates), **({"judge": judge} if judge else {})}
        if phases and {k: phases[-1].get(k) for k in now} == now:
            phases[-1]["end"] = t + 1
        else:
            phases.append({"start": t, "end": t + 1, **now})
    return {
        "type": scenario.schedule.type,
        "unit": unit,
        "switch_points": list(schedule.switch_points()),
        "phases": phases[:MAX_PHASES],
        "phases_left_out": max(0, len(phases) - MAX_PHASES),
    }


def judge_labels(schedule: Any) -> Any:
    """t -> the judge in force ("default", a key of `judges:`; "A -> B (blend)" inside a blend's
    window), or None for a schedule that does not change the judge."""
    pick = getattr(schedule, "judge_at", None)
    if not callable(pick):
        return lambda t: None
    blends = [c for c in getattr(schedule, "judge_changes", list)() if c["window"][1] > c["window"][0]]

    def label(t: int) -> str:
        inside = next((c for c in blends if c["window"][0] <= t < c["window"][1]), None)
        return f"{inside['from_judge']} -> {inside['to_judge']} (blend)" if inside else str(pick(t))

    return label


def runtime_plan(scenario: Scenario) -> dict[str, Any]:
    rt = scenario.runtime
    ray = rt.parallel_arms or any(scenario.runtime_for(arm).kind == "ray" for arm in scenario.arms)
    from testbed.device import gpus, resolve

    devices = sorted({f"{resolve(scenario.runtime_for(arm).device)}" for arm in scenario.arms})
    return {
        "kind": rt.kind,
        "parallel_arms": rt.parallel_arms,
        "ray": ray,
        "task_cpus": rt.task_cpus,
        "device": rt.device,
        "resolved_device": ", ".join(devices),
        **({"actor_gpus": gpus(rt, "actor"), "task_gpus": gpus(rt, "task")} if ray else {}),
        "torch_threads": rt.torch_threads,
        "numerics": scenario.numerics,
        "address": public_args(rt.address or os.environ.get("RAY_ADDRESS"), "address") if ray else None,
        **({"simulation": rt.simulation.model_dump()} if rt.kind == "simulated" else {}),
    }


def device_problems(scenario: Scenario) -> list[str]:
    """`runtime.device` this machine cannot give: a run would refuse to start (exit 2)."""
    from testbed.device import scenario_problems

    return [f"{p} (a run here refuses to start)" for p in scenario_problems(scenario)]


def run_directory(scenario: Scenario, out_dir: str | None, run_name: str | None) -> str:
    """Where the run directory would go, refusing what RunStore.create refuses (with its words)."""
    parent = Path(out_dir or scenario.output.dir)
    if parent.exists() and not parent.is_dir():
        raise ScenarioError(f"cannot write the run directory under {parent}: it is not a directory")
    if run_name is not None:
        root = parent / run_name
        if root.exists():
            raise ScenarioError(
                f"run directory {root} already exists; continue it with --resume {root} or choose another name"
            )
        return str(root)
    return str(parent / f"{scenario.name}-<timestamp>")
