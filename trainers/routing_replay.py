"""Routing replay (`routing_replay`, docs/algorithms.md): which expert ids a training forward is made
to use, per micro-batch; the forward itself forces them (testbed/models/routing.py, `expert_choice`:
the replayed experts, gate weights from the live router).

- `r3` (rollout routing replay, arXiv 2510.11370): the experts the rollout engine chose for every
  token it fed, as the Trajectory carries them (`Batch.experts`). With stale rollouts that is the
  routing of the version that generated the episode.
- `r2` (routing replay): the trainer's own choice at the start of the update, from a no-grad
  forward of the model before any step (`own_routing`), held through the update's steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from testbed.models.routing import UNRECORDED, top_k_ids
from trainers.batching import Batch

# a model's router logits on a micro-batch (one [B * T, E] per MoE layer), no gradient needed
RouterLogits = Callable[[Batch], tuple | None]


def rollout_routing(mb: Batch) -> Tensor:
    """r3: the engine's expert ids [B, T, L, k]; refused when a token whose log-prob the loss reads
    was decided by a position the engine did not record."""
    if mb.experts is None:
        raise ValueError(
            "routing_replay: r3 replays the experts the rollout engine recorded, and these episodes carry none "
            "(an engine that does not return its routing, e.g. a vLLM build without enable_return_routed_experts)"
        )
    deciding = torch.nn.functional.pad(mb.action_mask[:, 1:], (0, 1), value=False)  # position t-1 of action token t
    missing = deciding & (mb.experts < 0).flatten(2).any(-1)
    if bool(missing.any()):
        raise ValueError(f"routing_replay: r3: {int(missing.sum())} action tokens have no recorded routing")
    return mb.experts


@torch.no_grad()
def own_routing(router_logits: RouterLogits, mb: Batch, top_k: int) -> Tensor | None:
    """r2: the expert ids [B, T, L, k] the model routes `mb`'s tokens to now (UNRECORDED at padding)."""
    logits = router_logits(mb)
    if not logits:
        return None
    ids = top_k_ids(logits, top_k, *mb.tokens.shape)
    return ids.masked_fill(~mb.attention_mask.bool()[:, :, None, None], UNRECORDED)


def replay_for(mode: str, router_logits: RouterLogits, top_k: int | None, mb: Batch) -> Tensor | None:
    """The ids a training forward on `mb` replays under `mode` (off: None)."""
    if mode == "off" or top_k is None:
        return None
    if mode == "r3":
        return rollout_routing(mb)
    return own_routing(router_logits, mb, top_k)
