"""How an arm's engine, env and trainer are built, like every plugin through the registry
(`registry.build`), and the seeding of every random generator a run draws from. The runtimes
import these through `testbed.runtimes.runner`, whose `ArmRunner` runs the arm.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from testbed import registry
from testbed.envs.episode import takes_streams
from testbed.models.tokenizer import WordTokenizer
from testbed.protocols import DriftSchedule, Engine, Env, Judge, missing_methods
from testbed.runtimes.learner_strategy import micro_batching
from testbed.scenario.schema import ArmConfig, Scenario
from testbed.world import prompts


def make_engine(scenario: Scenario, policy: torch.nn.Module, tokenizer: WordTokenizer) -> Engine:
    """The scenario's rollout engine, built like every plugin (registry.build)."""
    engine = registry.build(scenario.engine.load(), scenario.engine.args, policy, tokenizer, scenario.sampling)
    if scenario.sampling.streams == "episode" and not takes_streams(engine):
        raise ValueError(
            f"sampling.streams: episode needs an engine whose generate takes `streams`; engine {scenario.engine.type} "
            f"({type(engine).__name__}) does not: use sampling.streams: batch, or see docs/plugins.md"
        )
    return engine


def make_env(scenario: Scenario, arm: ArmConfig, judge: Judge, schedule: DriftSchedule, seed: int) -> Env:
    """The arm's environment over the training prompts, built like every plugin (registry.build)."""
    spec = scenario.env_for(arm)
    world = (
        {"candidate_change_share": scenario.world.candidate_change_share}
        if scenario.world.candidate_change_share < 1
        else {}
    )
    env = registry.build(spec.load(), spec.args, judge, schedule, prompts("train"), seed=seed, **world)
    missing = missing_methods(env, Env)
    if missing:
        raise TypeError(
            f"env {spec.type} gave a {type(env).__name__} without {', '.join(missing)} (testbed.protocols.Env)"
        )
    return env


def make_trainer(
    arm: ArmConfig, policy: torch.nn.Module, tokenizer: WordTokenizer, scenario: Scenario, seed: int
) -> Any:
    """The arm's trainer, built like every plugin (registry.build)."""
    trainer = registry.build(
        arm.trainer_class(),
        arm.args,
        policy,
        pad_id=tokenizer.pad_id,
        temperature=scenario.sampling.temperature,
        seed=seed,
    )
    return micro_batching(trainer, scenario.runtime_for(arm).micro_batch_tokens)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
