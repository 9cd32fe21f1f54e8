"""The optional MoE load-balancing loss (Switch Transformer eqs. 4-6, as Mixtral and transformers'
Qwen3-MoE `load_balancing_loss_func` compute it), for the trainers' `router_aux_loss_coef`:

    L_aux = E x sum_e f_e x P_e,
    f_e = share of routed (token, top-k slot) assignments that go to expert e (no gradient),
    P_e = mean router probability of expert e,

both over the real (attention-mask) tokens of every MoE layer, as transformers does. It pushes
the router towards a uniform load; E x sum f P = top_k exactly when the load is uniform.

Why not call transformers' function: L_aux is a product of two batch means, not a token mean, so
(n_w / N)-weighted shard losses would not sum to the batch's. Here f, the token count and the
probability sums are all-reduced (one collective; a no-op in a single process) and each rank's
loss is its own share of the batch's L_aux, divided by its shard weight because the learner
scales every gradient by that weight. In a single process the value equals transformers'.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from testbed.models.modules import EXPERT_COUNT_FIELDS, moe_shape
from trainers import data_parallel


def router_sums(
    router_logits: tuple[torch.Tensor, ...], attention_mask: torch.Tensor, num_experts: int, top_k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This batch's (expert counts, router probability sums, routed rows) over its real tokens."""
    flat_mask = attention_mask.reshape(-1).float()
    counts = torch.zeros(num_experts, device=flat_mask.device)
    prob_sum = torch.zeros(num_experts, device=flat_mask.device)
    rows = torch.zeros((), device=flat_mask.device)
    for layer_logits in router_logits:
        probs = F.softmax(layer_logits.float(), dim=-1)
        chosen = probs.topk(top_k, dim=-1).indices.reshape(-1)
        counts = counts + torch.zeros_like(counts).scatter_add_(0, chosen, flat_mask.repeat_interleave(top_k))
        prob_sum = prob_sum + (probs * flat_mask.unsqueeze(-1)).sum(0)
        rows = rows + flat_mask.sum()
    return counts, prob_sum, rows


def router_balance_loss(
    router_logits: tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor,
    num_experts: int,
    top_k: int,
    totals: torch.Tensor | None = None,
    share: float | None = None,
) -> tuple[torch.Tensor, float]:
    """(the term to add to this rank's loss, the batch's L_aux for the metrics). A micro-batch
    (trainers/micro_batch.py) passes the whole batch's all-reduced `totals` (counts, probability
    sums, rows: `router_sums` of every micro-batch) and its `share` of the loss's tokens, by which
    the trainer scales its loss: its term is then its own part of the batch's L_aux over `share`."""
    counts, prob_sum, rows = router_sums(router_logits, attention_mask, num_experts, top_k)
    if totals is None:  # one collective for the three sums (no gradient flows through it)
        totals = data_parallel.all_reduce_sum(torch.cat([counts, prob_sum.detach(), rows[None]]))
    counts_all, prob_sum_all, rows_all = totals[:num_experts], totals[num_experts:-1], totals[-1]
    load = counts_all / rows_all  # f_e, the batch's
    value = float(num_experts * (load * (prob_sum_all / rows_all)).sum())
    part = num_experts * (load * (prob_sum / rows_all)).sum()  # this rank's part of the batch's L_aux
    weight = data_parallel.active_weight()
    weight = (1.0 if weight is None else weight) * (1.0 if share is None else share)
    return (part if weight == 1.0 else part / max(weight, 1e-12)), value


def with_router_aux(
    loss: torch.Tensor,
    stats: dict,
    coef: float,
    router_logits: tuple | None,
    attention_mask: torch.Tensor,
    model_config,
    key: str = "router_aux_loss",
    totals: torch.Tensor | None = None,
    share: float | None = None,
) -> torch.Tensor:
    """`loss + coef x L_aux`, logging L_aux under `key` in `stats`; `loss` itself when coef is 0
    (the default: no extra work, behaviour unchanged). `totals`, `share`: a micro-batch's
    (`router_balance_loss`)."""
    if coef <= 0 or not router_logits:
        return loss
    shape = moe_shape(model_config)
    if shape is None:
        raise ValueError(
            f"router_aux_loss_coef is {coef} but {type(model_config).__name__} names no routed experts "
            f"(none of {', '.join(EXPERT_COUNT_FIELDS)} with num_experts_per_tok)"
        )
    aux, stats[key] = router_balance_loss(router_logits, attention_mask, *shape, totals, share)
    return loss + coef * aux
