"""MoE routing as data: which experts each token went to, how an engine may perturb that choice,
and how a training forward may be made to replay it (docs/models.md, "Routing").

- `expert_choice`: the top-k choice and its gate weights from a router's logits,
      p = softmax(z),  S = top_k(p) (or the forced set F),  g_e = p_e / sum_{j in S} p_j  (e in S)
  (without `norm_topk_prob`, g_e = p_e). Forced rows take F whatever the logits say, and their
  gate weights still come from the live logits z, so the router's gradient flows through g.
- `RouterPerturbation`: the engine's routing mismatch on purpose (`engine.args.router_noise`,
  `router_rounding`): the router's logits rounded to bfloat16 and/or given Gaussian noise from the
  engine's own generator before the choice, so a top-k choice flips where the router is nearly tied.
- The record: per token fed through the model, the expert ids of every MoE layer, [positions,
  layers, top_k] in the smallest integer type that holds them (`compact`); a Trajectory carries
  it (`testbed.types.Trajectory.experts`) and `expert_table` pads a batch's into [B, T, L, k] with
  `UNRECORDED` (-1) where nothing was recorded: the last token of each sequence (never fed) and
  padding. Routing at position p decides the log-prob of token p + 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

UNRECORDED = -1  # a position with no recorded routing: replay leaves it free


def expert_choice(
    logits: torch.Tensor, top_k: int, norm_topk_prob: bool, forced: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate weights [N, k] float32, expert ids [N, k] long) from router logits [N, E], as
    transformers' top-k routers compute them (softmax in float32, top-k, renormalised). `forced`
    [N, k]: expert ids to use instead where a row holds no `UNRECORDED` (routing replay); those
    rows' gate weights are the live softmax's on the forced experts, renormalised alike."""
    probs = F.softmax(logits, dim=-1, dtype=torch.float)
    top, index = torch.topk(probs, top_k, dim=-1)
    if forced is not None:
        replayed = (forced >= 0).all(-1, keepdim=True)
        index = torch.where(replayed, forced.long().clamp(min=0), index)
        top = probs.gather(-1, index)
    if norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return top, index


def top_k_ids(router_logits: Sequence[torch.Tensor], top_k: int, batch: int, width: int) -> torch.Tensor:
    """The expert ids [B, T, L, k] (long) each layer's router picks from its logits [B * T, E]."""
    ids = [F.softmax(z.detach(), dim=-1, dtype=torch.float).topk(top_k, dim=-1).indices for z in router_logits]
    return torch.stack(ids, dim=1).view(batch, width, len(ids), top_k)


def compact(ids: torch.Tensor, num_experts: int) -> np.ndarray:
    """Expert ids as a small-integer array (uint8 up to 256 experts, else int16) for a Trajectory."""
    dtype = np.uint8 if num_experts <= 256 else np.int16
    return ids.to("cpu").numpy().astype(dtype)


def expert_table(records: Sequence[np.ndarray | None], width: int) -> torch.Tensor | None:
    """A batch's records as [B, width, L, k] long, row b's record at positions 0..n_b - 1 and
    `UNRECORDED` elsewhere (a row without a record: all `UNRECORDED`); None when no row has one."""
    shapes = {r.shape[1:] for r in records if r is not None}
    if not shapes:
        return None
    if len(shapes) > 1:
        raise ValueError(f"the episodes' expert records have different shapes (layers, top_k): {sorted(shapes)}")
    (layers, k) = shapes.pop()
    table = torch.full((len(records), width, layers, k), UNRECORDED, dtype=torch.long)
    for row, record in enumerate(records):
        if record is not None and len(record):
            n = min(len(record), width)
            table[row, :n] = torch.from_numpy(record[:n].astype(np.int64))
    return table


def shifted(ids: torch.Tensor) -> torch.Tensor:
    """[B, T, L, k] ids moved one position right (position t holds position t - 1's, position 0
    `UNRECORDED`): aligned with the log-prob of token t, which the routing at t - 1 decides."""
    return F.pad(ids[:, :-1], (0, 0, 0, 0, 1, 0), value=UNRECORDED)


class RouterPerturbation:
    """The engine's routing mismatch (`router_rounding`, `router_noise`): applied to each MoE
    layer's router logits before the top-k choice. Off (the default), it is never called."""

    def __init__(self, rounding: Literal["bfloat16"] | None = None, noise: float = 0.0, seed: int = 0):
        if rounding not in (None, "bfloat16"):
            raise ValueError(f"engine.args.router_rounding must be bfloat16 or unset, got {rounding!r}")
        if not noise >= 0:
            raise ValueError(f"engine.args.router_noise must be >= 0, got {noise!r}")
        self.rounding, self.noise = rounding, float(noise)
        # its own stream (not the logit noise's, not the sampling's): seeded from (seed, 1)
        seed_of = int(np.random.SeedSequence([int(seed), 1]).generate_state(1)[0])
        self.generator = torch.Generator().manual_seed(seed_of) if self.noise > 0 else None

    @property
    def active(self) -> bool:
        return self.rounding is not None or self.generator is not None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if self.rounding == "bfloat16":
            logits = logits.to(torch.bfloat16).to(logits.dtype)
        if self.generator is not None:
            noise = torch.randn(logits.shape, generator=self.generator, dtype=torch.float32)
            logits = logits + self.noise * noise.to(device=logits.device, dtype=logits.dtype)
        return logits
