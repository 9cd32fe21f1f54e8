"""The Ray runtime's learner: `workers` Ray actors that each hold the same trainer and form one
torch.distributed process group (gloo on CPU, nccl where the actors have GPUs).

An update splits the batch into contiguous shards (whole groups when the trainer's group size
is above 1, so GRPO's group normalisation never spans two shards), and each worker runs the
plain `trainer.update(shard)` inside `shard_weight(n_shard / n_batch action tokens)`. The
trainer's models are on torch's engines (testbed/runtimes/learner_strategy.py: DDP for
`replicate`, FSDP2 for `fsdp`), which average the ranks' gradients of the share-scaled losses
(trainers/data_parallel.py), so every worker takes the step one trainer would take on the whole
batch; under `replicate` the workers' parameters stay bit-identical. With one worker there is no
process group: it is a single remote trainer.

The trainer comes from `make_trainer`, a zero-argument picklable callable that must build the
same trainer on every call (seed the model): the workers compare digests of their starting state
and refuse to start otherwise (a state_dict would not carry e.g. a KL reference model).

This module is the driver's side (sharding the batch, one trainer-like `LearnerGroup`); the worker,
the Ray actor on each rank, is testbed/runtimes/ray/learner_worker.py.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import ray

from testbed.runtimes.checkpoint import SHARDED
from testbed.runtimes.ray.learner_worker import (
    LearnerWorker,
    digest,
    flat_state,
    gradients,
    join_process_group,
    loopback_interface,
    rendezvous_address,
)
from testbed.scenario.sharding import FSDPConfig
from testbed.types import Trajectory

__all__ = [
    "EXPERT_LOAD",
    "LearnerGroup",
    "LearnerWorker",
    "action_tokens",
    "digest",
    "flat_state",
    "gradients",
    "join_process_group",
    "loopback_interface",
    "rendezvous_address",
    "shard_weights",
    "split_batch",
]

EXPERT_LOAD = "expert_load"  # metrics with this in their name are also reported per worker


# -- sharding (pure) ----------------------------------------------------------------------------
def action_tokens(traj: Trajectory) -> int:
    return sum(len(seg.tokens) for seg in traj.segments if seg.kind == "action")


def split_batch(batch: Sequence[Trajectory], workers: int, keep_groups: bool) -> list[list[Trajectory]]:
    """`workers` contiguous shards of about equal size, in batch order; with `keep_groups` a run
    of equal `group_id`s is never split (and a group must be one run)."""
    units: list[list[Trajectory]] = []
    for traj in batch:
        if keep_groups and units and units[-1][-1].group_id == traj.group_id:
            units[-1].append(traj)
        else:
            units.append([traj])
    if keep_groups and len({unit[0].group_id for unit in units}) != len(units):
        raise ValueError("a group's trajectories must be contiguous in the batch (a shard must not split a group)")
    if len(units) < workers:
        what = "groups" if keep_groups else "trajectories"
        raise ValueError(f"a batch of {len(units)} {what} cannot feed {workers} learner workers")
    bounds = [round(k * len(units) / workers) for k in range(workers + 1)]
    return [[t for unit in units[bounds[k] : bounds[k + 1]] for t in unit] for k in range(workers)]


def shard_weights(shards: Sequence[Sequence[Trajectory]]) -> list[float]:
    """Each shard's share of the batch's action tokens (the losses are token means over them)."""
    counts = [sum(action_tokens(t) for t in shard) for shard in shards]
    total = sum(counts)
    return [c / total if total else 1.0 / len(shards) for c in counts]


def _get_all(refs: Sequence[ray.ObjectRef], grace_s: float = 5.0) -> list[Any]:
    """ray.get of every ref, raising as soon as one fails (not when the slowest is done: a
    failed worker leaves the others waiting in a collective until its timeout).

    A dead worker also breaks the others' collectives (gloo: connection closed), so if an actor
    death is among the failures within `grace_s`, that is what is raised: the cause, and the
    error the runtime stops on (RayActorError)."""
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(ready)
        except ray.exceptions.RayActorError:
            raise
        except ray.exceptions.RayError:
            done = ray.wait(pending, num_returns=len(pending), timeout=grace_s)[0] if pending else []
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as died:
                    raise died from None
            raise
    return ray.get(list(refs))


@ray.remote(num_cpus=0)
def _combine(refs: list[ray.ObjectRef]) -> tuple[dict, int, dict]:
    """One update's result: rank 0's metrics and published policy (its buckets' refs: the objects
    stay where rank 0 put them), plus every worker's expert load."""
    results = _get_all(refs)
    metrics, version, policy = results[0]
    metrics = dict(metrics)
    for rank, (worker_metrics, worker_version, _) in enumerate(results):
        if worker_version != version:
            raise RuntimeError(f"learner worker {rank} is at policy version {worker_version}, rank 0 at {version}")
        metrics.update({f"{k}_w{rank}": v for k, v in worker_metrics.items() if EXPERT_LOAD in k})
    metrics["learner_workers"] = len(results)
    return metrics, version, policy


# -- the group (driver side) --------------------------------------------------------------------
class LearnerGroup:
    """`workers` data-parallel learner actors behind one trainer-like API. Blocking, except
    `update`, which returns a ref to (metrics, version, the policy's published buckets: a list of
    refs to Ray objects, each a part of its full state_dict on the CPU, put by rank 0)."""

    def __init__(
        self,
        make_trainer: Callable[[], Any],
        workers: int,
        *,
        torch_threads: int = 1,
        actor_cpus: float = 0.5,
        actor_gpus: float = 0.0,
        timeout_s: float = 300.0,
        name: str | None = None,
        strategy: str = "replicate",
        fsdp: FSDPConfig | None = None,
    ):
        if workers < 1:
            raise ValueError("a learner needs at least one worker")
        # Sharded ranks gather a state together: every call that returns one goes to all of them.
        self.sharded = strategy == "fsdp" and workers > 1
        actor = ray.remote(LearnerWorker)
        # One copy of the factory (it carries the starting policy's weights) in the object store for
        # all the ranks: passed by value, Ray would store it once per actor.
        factory = ray.put(make_trainer)
        self.workers = [
            actor.options(
                num_cpus=actor_cpus, num_gpus=actor_gpus, name=f"{name}-learner{rank}" if name else None
            ).remote(factory, rank, workers, torch_threads, strategy, fsdp)
            for rank in range(workers)
        ]
        self.init_method: str | None = None
        try:
            self.init_method = ray.get(self.workers[0].rendezvous_address.remote()) if workers > 1 else None
            infos = _get_all([w.setup.remote(self.init_method, timeout_s) for w in self.workers])
            if len({info["digest"] for info in infos}) > 1:
                raise RuntimeError(
                    "make_trainer built different trainers on different workers; it must be "
                    "deterministic (seed the model)"
                )
        except BaseException:
            self.shutdown()
            raise
        info = infos[0]
        self.group_size: int = info["group_size"]
        self.episodes_per_update: int = info["episodes_per_update"]
        self.warmup_samples: int = info["warmup_samples"]
        # checkpoints in shards (torch.distributed.checkpoint) where the ranks hold shards
        self.sharded_checkpoints = self.sharded and info["splits"]

    @property
    def size(self) -> int:
        return len(self.workers)

    def update(self, batch: Sequence[Trajectory]) -> ray.ObjectRef:
        """Start one update; the ref raises a Ray error if a worker failed or died."""
        weights: list[float | None]
        if self.size == 1:
            shards, weights = [list(batch)], [None]
        else:
            shards = split_batch(batch, self.size, keep_groups=self.group_size > 1)
            weights = list(shard_weights(shards))
        refs = [w.update.remote(shard, weight) for w, shard, weight in zip(self.workers, shards, weights)]
        return _combine.remote(refs)

    def _rank0(self, method: str, *args: Any) -> Any:
        return ray.get(self.workers[0].call.remote(method, *args))

    def _state(self, method: str, *args: Any) -> Any:
        """Rank 0's answer to a call that returns a state (all ranks gather it where sharded)."""
        return self._all(method, *args)[0] if self.sharded else self._rank0(method, *args)

    def _all(self, method: str, *args: Any) -> list[Any]:
        return _get_all([w.call.remote(method, *args) for w in self.workers])

    def version(self) -> int:
        return self._rank0("version")

    def state_dict(self) -> dict[str, Any]:
        return self._state("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if SHARDED in state:  # written by sharded ranks, any number of them: every rank reads its part
            rest = {k: v for k, v in state.items() if k != SHARDED}
            _get_all([w.load_sharded.remote(state[SHARDED], rest) for w in self.workers])
            return
        self._all("load_state_dict", ray.put(state))  # one copy in the object store for all

    def save_sharded(self, directory: Any) -> dict[str, Any]:
        """Every rank writes its shards into `directory`; the trainer's other state, naming it."""
        rest = _get_all([w.save_sharded.remote(str(directory)) for w in self.workers])[0]
        return {**rest, SHARDED: os.path.basename(directory)}

    def policy(self) -> list[ray.ObjectRef]:
        """The policy's full weights, published by rank 0 as `update` does: refs, one per bucket."""
        return _get_all([w.policy.remote() for w in self.workers])[0]

    def warmup(self, samples: list[Trajectory]) -> dict[str, Any]:
        """The trainer's warm-up (SAO: value pretraining), not data-parallel: every rank runs it on
        all the samples, the engine averages W equal gradients, and the ranks stay identical."""
        return self._all("warmup", samples)[0]

    def warmup_key(self) -> dict[str, Any]:
        return self._rank0("warmup_key")

    def warmup_state(self) -> dict[str, Any]:
        return self._state("warmup_state")

    def load_warmup_state(self, state: dict[str, Any]) -> None:
        self._all("load_warmup_state", ray.put(state))

    def digests(self) -> list[str]:
        """A digest of each worker's whole trainer state (they must all be equal)."""
        return _get_all([w.digest.remote() for w in self.workers])

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
        if self.init_method and self.init_method.startswith("file://"):
            # a local run's store file, on this machine: killed workers leave it behind
            with contextlib.suppress(OSError):
                os.remove(self.init_method.removeprefix("file://"))
