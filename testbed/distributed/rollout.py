"""Rollout actors: each holds an engine with its own copy of the policy and generates single
rollouts for the prompts the driver sends, with the newest weights the learner has published.

Weights travel by version through Ray's object store: the driver passes the reference of the
newest policy state (wrapped in a list, so Ray does not fetch it for every call) and its version;
an actor fetches and loads it only when its version is older. So nothing is read from a disk the
actor's node may not have.
"""

from __future__ import annotations

import time
from typing import Any

import ray
import torch

from testbed.types import Trajectory


def build_policy(config: Any, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The policy from its transformers config and weights (no checkpoint directory needed)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state)
    return model.eval()


@ray.remote
class RolloutActor:
    def __init__(self, policy_config: Any, policy_state: dict, tokenizer: Any, engine: tuple[str, dict], sampling: Any,
                 seed: int, threads: int):
        from testbed import registry
        from testbed.loop import seed_everything

        torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS=1 in its workers
        policy = build_policy(policy_config, policy_state)
        name, args = engine
        self.engine = registry.load("engine", name)(policy, tokenizer, sampling, **args)
        self.version = 0
        seed_everything(seed)  # after building: the policy's random init must not shift the sampling stream

    def generate(self, prompts: list[str], weights: list[ray.ObjectRef], version: int) -> tuple[list[Trajectory], float]:
        """Sample one response per prompt with policy `version` (loaded first if newer);
        returns the trajectories and the seconds spent generating."""
        started = time.perf_counter()
        if version != self.version:
            self.engine.load_weights(ray.get(weights[0]), version)
            self.version = version
        return self.engine.generate(prompts), time.perf_counter() - started

    def ping(self) -> int:
        return self.version


class ActorEngine:
    """An Engine facade over a rollout actor, for held-out evaluation from the driver: it
    generates with the newest published weights."""

    def __init__(self, runner: Any, index: int):
        self.runner, self.index = runner, index

    def generate(self, prompts: list[str], n: int = 1) -> list[Trajectory]:
        return self.runner.generate_now(self.index, [p for p in prompts for _ in range(n)])

    def load_weights(self, state_dict: dict | None, version: int) -> None:  # the runner publishes weights
        pass
