"""Rollout actors: each holds an engine with its own copy of the policy and runs the episodes the
driver issues (the env's episode runner: one response, or every turn of a multi-turn episode
but its final judge call), with the newest weights the learner has published.

Weights travel by version through Ray's object store, in buckets: the driver passes the list of
references to the newest policy's parts (the learner puts one object per bucket as it gathers
them, `runtime.fsdp.publish_bucket_mb`; a list, so Ray does not fetch them for every call) and its
version. An actor whose version is older fetches the buckets one at a time and loads each into the
module its engine was built on (`load_buckets`: one bucket of full tensors in flight, never a
whole second copy), then calls the engine's `load_weights(None, version)`, as the synchronous loop
does after training the module the engine shares (the vLLM engine copies the module into vLLM in
place and checks its probe then). So nothing is read from a disk the actor's node may not have.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import ray
import torch

from testbed import registry
from testbed.cpu_numerics import configure_torch
from testbed.device import for_this_process
from testbed.judging.build import build_judge
from testbed.runtimes.runner import seed_everything
from testbed.scenario.schema import parse_scenario
from testbed.types import Trajectory


def build_policy(config: Any, state: dict[str, torch.Tensor], device: torch.device | str = "cpu") -> torch.nn.Module:
    """The policy from its transformers config and weights (no checkpoint directory needed), on `device`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(state)
    return model.to(device).eval()


def fetched(weights: list[Any]) -> Iterator[dict[str, torch.Tensor]]:
    """The published buckets one at a time (each a ref to a Ray object, or a dict as it is)."""
    for part in weights:
        yield ray.get(part) if isinstance(part, ray.ObjectRef) else part


def load_buckets(model: torch.nn.Module, weights: list[Any]) -> int:
    """Load a policy's published buckets into `model` in place, one at a time; raise unless they
    hold exactly the model's state_dict keys. Returns the number of buckets."""
    want, got, count = set(model.state_dict()), set[str](), 0
    for bucket in fetched(weights):
        result = model.load_state_dict(bucket, strict=False)
        if result.unexpected_keys or got & bucket.keys():
            raise RuntimeError(f"published weights: unexpected or repeated keys {sorted(result.unexpected_keys)[:5]}")
        got |= bucket.keys()
        count += 1
        del bucket
    if got != want:
        raise RuntimeError(
            f"published weights: {len(want - got)} of the policy's tensors missing, e.g. {sorted(want - got)[:5]}"
        )
    return count


class LazyReview:
    """A multi-turn editor's reads inside an actor: the scenario's judge, built on the first read
    (a single-turn env never reads, so never builds one), on one event loop for the actor's life.
    Like the env's `evaluate_batch`: each draft judged at its start's own target, no clock."""

    def __init__(self, scenario_data: dict):
        self.scenario_data, self.judge, self.runner = scenario_data, None, None

    def __call__(self, starts: list, drafts: list[str]) -> list:
        if self.judge is None:
            self.judge = build_judge(parse_scenario(self.scenario_data, "<scenario>"))
            self.runner = asyncio.Runner()
        verdicts = list(self.runner.run(self.judge.judge([s.request(d) for s, d in zip(starts, drafts)])))
        if len(verdicts) != len(starts):
            raise RuntimeError(f"the judge returned {len(verdicts)} verdicts for {len(starts)} drafts")
        return verdicts


@ray.remote
class RolloutActor:
    def __init__(
        self,
        policy_config: Any,
        policy_state: dict,
        tokenizer: Any,
        engine: tuple[str, dict],
        sampling: Any,
        seed: int,
        threads: int,
        episodes: Any = None,
        scenario_data: dict | None = None,
        device: str = "cpu",
    ):

        configure_torch(threads)  # Ray sets OMP_NUM_THREADS=1 in its workers
        policy = build_policy(policy_config, policy_state, for_this_process(device))  # runtime.device
        self.policy = policy  # the engine's module: published buckets load into it (`use`)
        name, args = engine
        self.engine = registry.build(registry.load("engine", name), args, policy, tokenizer, sampling)
        self.episodes = episodes  # the env's episode runner (testbed.envs: SingleTurn, Revision)
        self.review = LazyReview(scenario_data or {})
        self.version = 0
        seed_everything(seed)  # after building: the policy's random init must not shift the sampling stream

    def rollout(self, starts: list, weights: list[ray.ObjectRef], version: int) -> tuple[list[Trajectory], float]:
        """The episodes of `starts` with policy `version` (loaded first if newer); returns the
        trajectories (last responses not judged yet) and the seconds spent."""
        started = time.perf_counter()
        self.use(weights, version)
        return self.episodes(self.engine, starts, self.review), time.perf_counter() - started

    def generate(
        self, prompts: list[str], weights: list[ray.ObjectRef], version: int, streams: list[int] | None = None
    ) -> list[Trajectory]:
        self.use(weights, version)
        if streams is None:
            return self.engine.generate(prompts)
        return self.engine.generate(prompts, streams=streams)

    def extend(
        self,
        trajs: list[Trajectory],
        observations: list[str],
        weights: list[ray.ObjectRef],
        version: int,
        streams: list[int] | None = None,
    ) -> list[Trajectory]:
        self.use(weights, version)
        if streams is None:
            self.engine.extend(trajs, observations)
        else:
            self.engine.extend(trajs, observations, streams=streams)
        return trajs

    def use(self, weights: list[ray.ObjectRef], version: int) -> None:
        if version != self.version:
            load_buckets(self.policy, weights)
            self.engine.load_weights(None, version)  # the module it shares has the new weights
            self.version = version

    def ping(self) -> int:
        return self.version


class ActorEngine:
    """An Engine facade over a rollout actor, for held-out evaluation from the driver: it
    generates (and continues multi-turn trajectories) with the newest published weights."""

    def __init__(self, runner: Any, index: int):
        self.runner, self.index = runner, index

    def generate(self, prompts: list[str], n: int = 1, streams: list[int] | None = None) -> list[Trajectory]:
        if streams is not None and n != 1:
            raise ValueError("ActorEngine.generate: streams go with one sample per prompt")
        return self.runner.call_now(self.index, "generate", [p for p in prompts for _ in range(n)], streams=streams)

    def extend(self, trajs: list[Trajectory], observations: list[str], streams: list[int] | None = None) -> None:
        done_trajs = self.runner.call_now(self.index, "extend", trajs, observations, streams=streams)
        for traj, done in zip(trajs, done_trajs):
            traj.segments, traj.response_text, traj.policy_version, traj.experts = (
                done.segments,
                done.response_text,
                done.policy_version,
                done.experts,
            )

    def load_weights(self, state_dict: dict | None, version: int) -> None:  # the runner publishes weights
        pass
