"""Numerical-fault guard for the trainers' optimiser steps.

One non-finite step is enough to ruin a run: AdamW folds each gradient into its moment estimates,
so a single NaN/inf gradient turns exp_avg/exp_avg_sq into NaN and every later update into NaN,
even once the gradients are finite again. So a step whose loss or gradient is not finite is
skipped whole: parameters and optimiser state stay as they were, and the gradients are cleared.
The trainers count the skips and report them (metrics "nonfinite" and "skipped_steps").

Under data parallelism (trainers/data_parallel.py; a no-op in a single process) the ranks agree
on the loss's finiteness before backward, so that they skip together, and the weighted gradients
are all-reduced before `inspect` and clipping, so that every rank clips the same total norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

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
    data-parallel batch's gradient when there is one.

    Returns (total gradient norm before clipping, None) after a step, or (norm, "<what> loss")
    / (norm, "<what> grad norm") after a skip; the norm is nan when there was no backward.
    """
    params = list(params)
    _clear_grads(params, optimizer)
    if not data_parallel.agree_finite(math.isfinite(float(loss.detach()))):
        return float("nan"), f"{what} loss"  # no backward: it would only produce NaN gradients
    loss.backward()
    if (weight := data_parallel.active_weight()) is not None:
        data_parallel.reduce_gradients(params, weight)
    if inspect is not None:
        inspect()
    # clip_grad_norm_ returns the norm before clipping, nan/inf as soon as one gradient element is
    # (and it has then scaled every gradient by nan); with error_if_nonfinite=False the call is ours.
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if not math.isfinite(norm):
        _clear_grads(params, optimizer)
        return norm, f"{what} grad norm"
    optimizer.step()
    return norm, None


def _clear_grads(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
    for p in params:  # also any the optimiser does not hold
        p.grad = None
