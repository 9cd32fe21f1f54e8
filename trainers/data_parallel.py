"""Data-parallel maths for the trainers: a no-op unless this process trains one shard of a batch
(a torch.distributed process group of more than one rank is initialised AND the update runs
inside `shard_weight(w)`, testbed/shard.py, which the runtime that trains shards sets: the Ray
learner today). The trainers read the context, never the runtime (docs/distributed.md).

The gradients are reduced by torch's own engines, not here: the learner hands the trainers'
models to DistributedDataParallel (`learner_strategy: replicate`) or to FSDP2's `fully_shard`
(`fsdp`), and both average the ranks' gradients. Every loss in trainers/losses.py is a token mean
over the batch's N action tokens, and a rank holding n_w of them computes the mean over its own
n_w; so each rank scales its loss by `loss_scale()` = W x n_w / N before backward (as verl does),
and the engines' average (1/W) x sum_w W (n_w / N) grad_w is the full batch's gradient. Clipping
then sees the same total norm on every rank, and every rank takes the same optimiser step.

Three more things make the ranks agree:
- finiteness: a rank whose loss is nan must not skip `backward` alone (the others would wait in
  the gradient reduction forever), so the ranks all-reduce a "loss finite" flag first and skip
  together;
- order-dependent statistics (the running-mean window) see the whole batch: `full_batch`
  gathers the inputs from every rank in rank order and keeps this rank's slice of the result;
- batch-level statistics (the router load-balancing loss) all-reduce their sums
  (trainers/router_balance.py).
GRPO's group normalisation needs no collective: the learner never splits a group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from testbed.shard import current_shard_weight, shard_weight

__all__ = [
    "active_weight",
    "agree_finite",
    "all_reduce_sum",
    "full_batch",
    "loss_scale",
    "shard_weight",
    "world_size",
]


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def active_weight() -> float | None:
    """This shard's weight when the update is one shard of a data-parallel batch, else None
    (single process: every function below is then the identity)."""
    weight = current_shard_weight()
    return weight if weight is not None and world_size() > 1 else None


def _device() -> torch.device:
    # nccl reduces CUDA tensors only; gloo CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree_finite(finite: bool) -> bool:
    """True iff the loss is finite on every rank (always `finite` itself outside data parallel)."""
    if active_weight() is None:
        return finite
    flag = torch.tensor([0.0 if finite else 1.0], device=_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() == 0.0)


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of `x` over ranks (a detached copy; `x` itself outside data parallel)."""
    if active_weight() is None:
        return x
    out = x.detach().to(_device(), copy=True)
    dist.all_reduce(out)
    return out.to(x.device)


def loss_scale() -> float | None:
    """W x this shard's weight: the factor on this rank's token-mean loss that makes the engines'
    gradient average the whole batch's gradient (None outside data parallel: no scaling)."""
    weight = active_weight()
    return None if weight is None else world_size() * weight


def full_batch(fn: Callable[..., Sequence[Any]], items: Sequence[Any], *columns: Sequence[Any] | None) -> list[Any]:
    """`fn(items, *columns)` for per-item columns, computed over the whole data-parallel batch.

    Each rank passes its shard's columns (None stays None); they are gathered in rank order (the
    learner's shards are contiguous, so this is the batch order), `fn` runs on the concatenation
    on every rank (so any state it updates, e.g. a sliding window, is the same everywhere), and
    this rank's slice of its per-item result comes back."""
    if active_weight() is None:
        return list(fn(items, *columns))
    gathered: list[list[list[Any] | None]] = [[] for _ in range(world_size())]
    dist.all_gather_object(gathered, [list(items)] + [None if c is None else list(c) for c in columns])
    full = [None if shards[0] is None else [x for shard in shards for x in shard] for shards in zip(*gathered)]
    start = sum(len(shard[0] or ()) for shard in gathered[: dist.get_rank()])
    return list(fn(*full))[start : start + len(items)]
