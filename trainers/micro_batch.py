"""Micro-batching by tokens (`runtime.micro_batch_tokens`): a loss over a batch computed and
backpropagated a few rows at a time, so that the activations autograd keeps are bounded by the
micro-batch's tokens whatever the batch.

Every loss the trainers take is a token mean over the batch's N masked tokens, L = (1/N) sum_t l_t.
A micro-batch m holding n_m of them computes its own mean L_m, and L = sum_m (n_m / N) L_m: so
each micro-batch's loss is backpropagated with weight n_m / N and the gradients accumulate to the
whole batch's (token-weighted, not micro-batch-averaged). What needs the whole batch (the running
mean's window, GRPO's group advantages, SAO's GAE over each whole sequence) is computed before the
split; a micro-batch only slices rows of it.

Micro-batches are contiguous rows, each cut to its own longest row (right padding), holding at
most `budget` tokens counted as rows x width (what a forward pass processes), and at least one
row. Under data parallelism every backward is a collective (DDP's all-reduce, FSDP2's gathers
and reduce-scatters), so the ranks agree on the number of micro-batches (the largest any rank
needs); a rank with fewer rows than that runs the extra ones on one row with weight 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from testbed.models.modules import moe_shape
from testbed.models.policy import hidden_states
from trainers import data_parallel
from trainers.batching import Batch, map_tensors
from trainers.router_balance import router_sums


@dataclass
class Piece:
    """Rows [start, stop) of a batch cut to `width` columns; `weight` = its share of the loss's
    tokens (None: the whole batch, uncut); `stand_in`: a weight-0 piece that only keeps this rank
    in step with the others' collectives."""

    batch: Batch
    start: int
    stop: int
    width: int
    weight: float | None = None
    stand_in: bool = False

    def cut(self, x: torch.Tensor) -> torch.Tensor:
        """The same rows (and columns) of another per-row tensor of the batch."""
        if self.weight is None:
            return x
        rows = x[self.start : self.stop]
        return rows[:, : self.width] if rows.dim() > 1 else rows


def row_ranges(lengths: list[int], budget: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) row ranges, each with rows x its longest length <= budget (a
    longer single row alone). Pure, greedy."""
    ranges, start, longest = [], 0, 0
    for i, length in enumerate(lengths):
        wider = max(longest, length)
        if i > start and (i + 1 - start) * wider > budget:
            ranges.append((start, i))
            start, wider = i, length
        longest = wider
    if lengths:
        ranges.append((start, len(lengths)))
    return ranges


def _agreed_count(count: int) -> int:
    """The largest count over the data-parallel ranks (`count` itself in one process)."""
    if data_parallel.active_weight() is None:
        return count
    flag = torch.tensor([count], dtype=torch.float64, device=data_parallel._device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def _cut_batch(data: Batch, start: int, stop: int, width: int) -> Batch:
    return map_tensors(data, lambda t: t[start:stop, :width] if t.dim() > 1 else t[start:stop])


def split(data: Batch, budget: int | None, mask: torch.Tensor) -> list[Piece]:
    """The batch's micro-batches, weighted by their share of `mask`'s tokens (the loss's mask);
    one uncut piece when there is no budget. A collective under data parallelism (with a budget)."""
    if budget is None:
        return [Piece(data, 0, data.tokens.shape[0], data.tokens.shape[1])]
    lengths = [max(int(n), 1) for n in data.attention_mask.sum(1).tolist()]
    ranges = row_ranges(lengths, budget)
    stand_ins = _agreed_count(len(ranges)) - len(ranges)
    total = float(mask.bool().sum().clamp(min=1))
    pieces = []
    for k, (start, stop) in enumerate(ranges + [(0, 1)] * stand_ins):
        width, stand_in = max(lengths[start:stop]), k >= len(ranges)
        share = 0.0 if stand_in else float(mask[start:stop].bool().sum()) / total
        pieces.append(Piece(_cut_batch(data, start, stop, width), start, stop, width, share, stand_in))
    return pieces


def combine(parts: list[tuple[float | None, dict[str, float]]]) -> dict[str, float]:
    """Per-piece metrics that are token means, as the whole batch's: their weighted sum (a
    single uncut piece's own). Keys missing from a piece count as 0 there."""
    if len(parts) == 1 and parts[0][0] is None:
        return dict(parts[0][1])
    out: dict[str, float] = {}
    for weight, metrics in parts:
        for key, value in metrics.items():
            out[key] = out.get(key, 0.0) + (weight or 0.0) * float(value)
    return out


def routed(parts: list[tuple[tuple | None, torch.Tensor]]) -> tuple[tuple | None, torch.Tensor]:
    """Router logits and token masks of the pieces, as one batch for the expert-load diagnostics
    (each layer's [tokens, experts] concatenated, the masks flattened alike)."""
    if len(parts) == 1:
        return parts[0]
    if any(router is None for router, _ in parts):
        return None, torch.cat([m.reshape(-1) for _, m in parts])
    layers = zip(*(router for router, _ in parts))
    return tuple(torch.cat([x.detach() for x in layer]) for layer in layers), torch.cat(
        [m.reshape(-1) for _, m in parts]
    )


def scatter_rows(pieces: list[Piece], values: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Per-piece [rows, width] outputs back into one [B, T] tensor (0 beyond each piece's width)."""
    if len(pieces) == 1 and pieces[0].weight is None:
        return values[0]
    out = torch.zeros_like(like, dtype=values[0].dtype)
    for piece, value in zip(pieces, values):
        if not piece.stand_in:
            out[piece.start : piece.stop, : piece.width] = value
    return out


def router_totals(pieces: list[Piece], route: Callable[[Batch], tuple | None], coef: float, config: Any) -> Any:
    """The router load-balancing loss is a product of two batch means, not a token mean: each
    micro-batch needs the whole batch's expert counts (no gradient) before its own backward. So a
    no-grad routing pass over the micro-batches first, their sums all-reduced over the ranks (the
    `totals` of trainers/router_balance.py). None without micro-batches or without the loss."""
    shape = moe_shape(config)
    if coef <= 0 or shape is None or (len(pieces) == 1 and pieces[0].weight is None):
        return None
    sums = None
    with torch.no_grad():
        for piece in pieces:  # stand-ins too: under FSDP2 a forward is a collective
            router = route(piece.batch)
            if router and not piece.stand_in:
                part = torch.cat([x.reshape(-1) for x in router_sums(router, piece.batch.attention_mask, *shape)])
                sums = part if sums is None else sums + part
    return None if sums is None else data_parallel.all_reduce_sum(sums)


def policy_routing(policy: Any) -> Callable[[Batch], tuple | None]:
    """A causal LM's router logits on a micro-batch (its decoder alone), for `router_totals`."""
    return lambda mb: hidden_states(policy.get_decoder(), mb.tokens, mb.attention_mask, True)[1]
