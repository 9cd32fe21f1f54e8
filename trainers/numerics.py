"""Numerical-fault guard for the trainers' optimiser steps.

One non-finite step is enough to ruin a run: AdamW folds each gradient into its moment estimates,
so a single NaN/inf gradient turns exp_avg/exp_avg_sq into NaN and every later update into NaN,
even once the gradients are finite again. So a step whose loss or gradient is not finite is
skipped whole: parameters and optimiser state stay as they were, and the gradients are cleared.
The trainers count the skips and report them (metrics "nonfinite" and "skipped_steps").

Under data parallelism (trainers/data_parallel.py; a no-op in a single process) the ranks agree
on the loss's finiteness before backward, so that they skip together, and each rank's loss is
scaled by its share of the batch, so that the gradient torch's engine (DDP or FSDP2) reduces in
backward is the whole batch's before `inspect` and clipping: every rank clips the same total norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainers import data_parallel


def guarded_step(
    loss: torch.Tensor,
    params: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float,
    what: str,
    inspect: Callable[[], None] | None = None,
) -> tuple[float, str | None]:
    """Backward, clip to `max_grad_norm` and step, unless the loss or the total gradient norm is
    not finite. `inspect` (gradient diagnostics) runs between backward and clipping, on the
    data-parallel batch's gradient when there is one (reduced by DDP or FSDP2 in backward).

    Returns (total gradient norm before clipping, None) after a step, or (norm, "<what> loss")
    / (norm, "<what> grad norm") after a skip; the norm is nan when there was no backward.
    """
    return guarded_steps(iter([(loss, None)]), params, optimizer, max_grad_norm, what, inspect)


def guarded_steps(
    pieces: Iterator[tuple[torch.Tensor, float | None]],
    params: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float,
    what: str,
    inspect: Callable[[], None] | None = None,
) -> tuple[float, str | None]:
    """`guarded_step` over a batch's micro-batches (trainers/micro_batch.py): `pieces` yields each
    micro-batch's (loss, its share of the batch's tokens), computed when asked for, so only one
    micro-batch's graph is alive; the weighted gradients accumulate, then one clipped step. A
    non-finite micro-batch loss skips the whole step. (loss, None): the whole batch at once."""
    params = list(params)
    _clear_grads(params, optimizer)
    scale = data_parallel.loss_scale()
    for loss, share in pieces:
        if not data_parallel.agree_finite(math.isfinite(float(loss.detach()))):
            _clear_grads(params, optimizer)  # the micro-batches before it are dropped too
            return float("nan"), f"{what} loss"  # no backward: it would only produce NaN gradients
        factor = share if scale is None else scale if share is None else scale * share
        (loss if factor is None else loss * factor).backward()  # DDP / FSDP2 average the ranks' gradients here
    if inspect is not None:
        inspect()
    # clip_grad_norm_ returns the norm before clipping, nan/inf as soon as one gradient element is
    # (and it has then scaled every gradient by nan); with error_if_nonfinite=False the call is ours.
    norm = clip_gradients(params, optimizer, max_grad_norm)
    if not math.isfinite(norm):
        _clear_grads(params, optimizer)
        return norm, f"{what} grad norm"
    optimizer.step()
    return norm, None


def clip_gradients(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, max_norm: float) -> float:
    """torch's clip_grad_norm_; for FSDP2's sharded parameters (DTensors), the norm of the full
    gradient (each rank's squares summed over the mesh) and the same clipping on every shard.

    Sharded, the gradients are read from the optimiser's parameters: `params` was listed after
    the forward, when FSDP2 had swapped the unsharded weights of the root units in (they get no
    gradient; their sharded parameters, which the optimiser holds, do)."""
    held = [p for group in optimizer.param_groups for p in group["params"]]
    if not any(isinstance(p, DTensor) for p in held):
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    grads = [p.grad for p in held if p.grad is not None]
    sharded = [g for g in grads if isinstance(g, DTensor)]
    squares = torch.stack([g.to_local().float().pow(2).sum() for g in sharded]).sum()
    dist.all_reduce(squares, group=sharded[0].device_mesh.get_group())  # the shards' squares, summed
    for g in grads:
        if not isinstance(g, DTensor):  # a replicated gradient counts once
            squares = squares + g.float().pow(2).sum()
    total = squares.sqrt()
    if torch.isfinite(total):
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # as clip_grad_norm_ scales
        with torch.no_grad():
            for g in grads:
                (g.to_local() if isinstance(g, DTensor) else g).mul_(scale.to(g.dtype))
    return float(total)


def _clear_grads(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
    for p in params:  # also any the optimiser does not hold
        p.grad = None
