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
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import socket
import tempfile
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import ray
import torch

from testbed.cpu_numerics import configure_torch
from testbed.models import lora
from testbed.runtimes import learner_strategy, sharded_checkpoint
from testbed.runtimes.checkpoint import SHARDED
from testbed.runtimes.ray.shard import shard_weight
from testbed.runtimes.sharded_state import full_state, published_policy
from testbed.scenario.sharding import FSDPConfig
from testbed.types import Trajectory

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


def flat_state(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A nested state (dicts, lists, tensors, numbers) as {path: leaf}."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {prefix: obj}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flat_state(value, f"{prefix}/{key}" if prefix else str(key)))
    return out


def gradients(trainer: Any) -> dict[str, torch.Tensor]:
    """The gradients left on the trainer's models (of its last optimiser step: guarded_step
    clears them only at the next one), for checks and diagnostics; full ones where sharded."""
    return {
        f"{attr}.{name}": full_state(p.grad.detach()).cpu().clone()
        for attr, module in vars(trainer).items()
        if isinstance(module, torch.nn.Module)
        for name, p in module.named_parameters()
        if p.grad is not None
    }


def digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        h.update(key.encode())
        if torch.is_tensor(value):
            value = value.detach().cpu().contiguous()
            h.update(f"{value.dtype}{tuple(value.shape)}".encode())
            h.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


# -- the process group -------------------------------------------------------------------------
def loopback_interface() -> str | None:
    """The loopback interface's name (lo on Linux, lo0 on macOS), where the system lists one."""
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), None)


def rendezvous_address() -> str:
    """The process group's init_method, made on rank 0's node. A node on a loopback address is a
    local run, every rank on this machine: a file store, since torch's TCPStore listens on every
    interface whatever host it is given. Else a free port on this node's IP."""
    ip = ray.util.get_node_ip_address()
    if ipaddress.ip_address(ip).is_loopback:
        return "file://" + os.path.join(tempfile.gettempdir(), f"testbed-rendezvous-{uuid.uuid4().hex}")
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        port = s.getsockname()[1]
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def join_process_group(init_method: str, rank: int, world: int, timeout_s: float) -> None:
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(0)  # Ray shows each actor only its own GPU(s)
    interface = loopback_interface() if init_method.startswith("file://") else None
    if interface:
        # a local run: gloo's and NCCL's own connections would listen on the address the host
        # name resolves to, which may be an external one
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )


# -- the worker (a Ray actor) -------------------------------------------------------------------
class LearnerWorker:
    def __init__(
        self,
        make_trainer: Callable[[], Any],
        rank: int,
        world: int,
        torch_threads: int,
        strategy: str = "replicate",
        fsdp: FSDPConfig | None = None,
    ):
        configure_torch(torch_threads)  # Ray sets OMP_NUM_THREADS=1 in its workers
        self.rank, self.world = rank, world
        self.make_trainer = make_trainer
        self.strategy, self.fsdp = strategy, fsdp
        self.bucket_bytes = fsdp.bucket_bytes() if fsdp is not None else None  # of the published policy
        self.trainer: Any = None
        self.merge: list[lora.MergeItem] | None = None  # policy.lora: how its adapters merge (setup)

    def rendezvous_address(self) -> str:
        return rendezvous_address()

    def setup(self, init_method: str | None, timeout_s: float) -> dict[str, Any]:
        if self.world > 1:
            join_process_group(init_method, self.rank, self.world, timeout_s)
        self.trainer = self.make_trainer()  # after the group, so a trainer can see it is data-parallel
        make_probe = getattr(self.make_trainer, "probe", None)  # engine.mismatch, where the factory offers it
        self.probe = make_probe(self.trainer) if callable(make_probe) else None
        t = self.trainer
        info = {
            "group_size": t.group_size,
            "episodes_per_update": t.episodes_per_update,
            "warmup_samples": getattr(t, "warmup_samples", 0),
            "digest": self.digest(),  # of the one-process trainer, before the engines take its models
            "splits": sharded_checkpoint.tensor_parts(t) is not None,  # can write a sharded checkpoint
        }
        policy = getattr(t, "policy", None)
        # policy.lora: which adapter updates which base tensor, read before an engine wraps the modules
        self.merge = lora.merge_plan(policy) if lora.has_adapters(policy) else None
        learner_strategy.apply(t, self.strategy, self.fsdp)
        return info

    def update(self, shard: list[Trajectory], weight: float | None) -> tuple[dict, int, dict | None]:
        # before the update: the weights that generated the fresh episodes (rank 0's shard is reported)
        mismatch = self.probe(shard, self.trainer.version) if getattr(self, "probe", None) is not None else {}
        if weight is None:
            metrics = self.trainer.update(shard)
        else:
            with shard_weight(weight):
                metrics = self.trainer.update(shard)
        model = getattr(self.trainer, "policy", None)
        if isinstance(model, torch.nn.Module):
            policy = published_policy(model, self.rank, self.bucket_bytes)  # a collective where sharded
            if policy is not None and self.merge is not None:  # the engines hold plain models
                policy = lora.merged_weights(policy, self.merge)
        else:  # a plug-in trainer: its state_dict's policy (the trainer protocol)
            policy = (
                {k: v.detach().cpu() for k, v in self.trainer.state_dict()["policy"].items()}
                if self.rank == 0
                else None
            )
        return {**metrics, **mismatch}, self.trainer.version, policy

    def call(self, method: str, *args: Any) -> Any:
        """A trainer method or attribute (the warm-up hooks, state_dict, version ...)."""
        from testbed.device import to_cpu

        value = getattr(self.trainer, method)
        # the driver keeps its states on the CPU, full (a collective where sharded)
        return to_cpu(full_state(value(*args) if callable(value) else value))

    def save_sharded(self, directory: str) -> dict[str, Any]:
        return sharded_checkpoint.save_sharded(self.trainer, directory)

    def load_sharded(self, directory: str, rest: dict[str, Any]) -> None:
        sharded_checkpoint.load_sharded(self.trainer, directory, rest)

    def policy(self) -> dict[str, torch.Tensor] | None:
        return published_policy(self.trainer.policy, self.rank, self.bucket_bytes)

    def flat_state(self) -> dict[str, Any]:
        return flat_state(full_state(self.trainer.state_dict()))

    def digest(self) -> str:
        return digest(self.flat_state())

    def gradients(self) -> dict[str, torch.Tensor]:
        return gradients(self.trainer)


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
    """One update's result: rank 0's metrics and policy, plus every worker's expert load."""
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
    `update`, which returns a ref to (metrics, version, rank 0's policy state_dict on CPU)."""

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
        self.workers = [
            actor.options(
                num_cpus=actor_cpus, num_gpus=actor_gpus, name=f"{name}-learner{rank}" if name else None
            ).remote(make_trainer, rank, workers, torch_threads, strategy, fsdp)
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
        if self.size == 1:
            shards, weights = [list(batch)], [None]
        else:
            shards = split_batch(batch, self.size, keep_groups=self.group_size > 1)
            weights = shard_weights(shards)
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

    def policy(self) -> dict[str, torch.Tensor]:
        """The policy's full weights (rank 0's gathered copy)."""
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
