"""The Ray runtime's learner, worker side: one `LearnerWorker` actor per rank, holding its own
trainer, joined to the others in one torch.distributed process group (gloo on CPU, nccl where the
actors have GPUs); and the pure helpers on its state (`flat_state`, `digest`, `gradients`). Each
update runs the plain `trainer.update(shard)` inside `shard_weight(w)`. The driver side (sharding
the batch, gathering the ranks' results) is `testbed/runtimes/ray/learner.py`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
import tempfile
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import ray
import torch

from testbed.cpu_numerics import configure_torch
from testbed.models import lora
from testbed.runtimes import learner_strategy, sharded_checkpoint
from testbed.runtimes.sharded_state import full_state, published_buckets
from testbed.scenario.sharding import FSDPConfig
from testbed.shard import shard_weight
from testbed.types import Trajectory


# -- the trainer's state (pure) ------------------------------------------------------------------
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
        return {**metrics, **mismatch}, self.trainer.version, self.publish()

    def publish(self) -> list[Any] | None:
        """Rank 0: the policy's full weights as Ray objects, one per bucket (`fsdp.publish_bucket_mb`),
        each put in the object store as soon as it is gathered (and, with policy.lora, merged), then
        dropped, so this process never holds more than one bucket of full tensors beside its own
        (shards); None on the other ranks, which take part in the gather where sharded. Outside Ray
        (a worker driven in process) the buckets themselves."""
        put: Callable[[Any], Any] = ray.put if ray.is_initialized() else (lambda bucket: bucket)
        model = getattr(self.trainer, "policy", None)
        if not isinstance(model, torch.nn.Module):  # a plug-in trainer: its state_dict's policy (the trainer protocol)
            if self.rank != 0:
                return None
            return [put({k: v.detach().cpu() for k, v in self.trainer.state_dict()["policy"].items()})]
        merge = self.merge or []  # policy.lora: each adapter pair travels with the weight it merges into
        refs = []
        for bucket in published_buckets(
            model, self.rank, self.bucket_bytes, [(m.lora_a, m.lora_b, m.target) for m in merge]
        ):
            if self.rank == 0:  # the engines hold plain models
                refs.append(
                    put(lora.merged_weights(bucket, [m for m in merge if m.target in bucket]) if merge else bucket)
                )
            del bucket
        return refs if self.rank == 0 else None

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

    def policy(self) -> list[Any] | None:
        return self.publish()

    def flat_state(self) -> dict[str, Any]:
        return flat_state(full_state(self.trainer.state_dict()))

    def digest(self) -> str:
        return digest(self.flat_state())

    def gradients(self) -> dict[str, torch.Tensor]:
        return gradients(self.trainer)
