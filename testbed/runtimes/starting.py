"""What RL starts from: each seed's SFT policy, trained or from the cache, checked by
sft_check.py."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, NamedTuple

from testbed.models import sft
from testbed.runtimes.bars import StepBar, make_progress
from testbed.runtimes.sft_check import sft_evaluator

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario


class StartingPolicy(NamedTuple):
    """The policy RL starts from (the SFT policy or a checkpoint), its tokenizer, cache key and report."""

    policy: Any
    tokenizer: Any
    key: str
    report: dict[str, Any]


def starting_configs(scenario: Scenario) -> dict[int, Any]:
    """The policy config of each distinct starting policy, by the seed that first uses it: one
    (the first seed's) shared by every seed, or with `policy.sft.per_seed` one per seed, its SFT
    seed = sft.seed + the run's seed."""
    sft = scenario.policy.sft
    if sft.per_seed and not scenario.policy.checkpoint:
        return {
            seed: scenario.policy.model_copy(update={"sft": sft.model_copy(update={"seed": sft.seed + seed})})
            for seed in scenario.seeds
        }
    return {scenario.seeds[0]: scenario.policy}


def starting_policies(scenario: Scenario, log: Any = print, progress: Any = None) -> dict[int, StartingPolicy]:
    """Each seed's starting policy: one SFT policy shared by every seed, or with
    `policy.sft.per_seed` one per seed (SFT seed = sft.seed + the run's seed, cached by seed, so
    the seeds' spread covers the starting policy too; seed 0's is the shared one). With parallel
    arms, the policies not yet in the cache are trained side by side as Ray tasks first. Each SFT
    run draws a bar per seed in `progress`, or in a display of its own if none is given."""
    configs = starting_configs(scenario)
    per_seed = scenario.policy.sft.per_seed and not scenario.policy.checkpoint
    if per_seed and scenario.runtime.parallel_arms:
        from testbed.runtimes.dispatch import runtime_session  # Ray loads only for parallel arms
        from testbed.runtimes.ray.parallel import train_policies_in_parallel

        with runtime_session(scenario):
            train_policies_in_parallel(scenario, configs, log=log, progress=progress)
    out: dict[int, StartingPolicy] = {}
    untrained = not all(sft.is_cached(cfg, scenario.world.archetypes, scenario.env) for cfg in configs.values())
    own = untrained and progress is None  # a display only if SFT runs here
    with make_progress() if own else contextlib.nullcontext(progress) as progress:
        for seed, cfg in configs.items():
            if per_seed:
                log(f"seed {seed}: its own SFT policy (sft.seed {cfg.sft.seed})")
            bar = StepBar(progress, "SFT", seed if per_seed else "all") if progress is not None else None
            policy, tokenizer, report = sft.load_or_train_policy(
                cfg, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=log, env=scenario.env, on_step=bar
            )
            out[seed] = StartingPolicy(policy, tokenizer, report.get("key") or report.get("checkpoint", ""), report)
    return {seed: out[seed] if seed in out else next(iter(out.values())) for seed in scenario.seeds}


def scenario_policy(scenario: Scenario, seed: int, log: Any = print) -> tuple[Any, Any, dict]:
    """The SFT policy a run of `scenario` starts seed `seed` from (cached, or trained now)."""
    cfg = scenario.policy
    if cfg.sft.per_seed:
        cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"seed": cfg.sft.seed + seed})})
    return sft.load_or_train_policy(
        cfg, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=log, env=scenario.env
    )
