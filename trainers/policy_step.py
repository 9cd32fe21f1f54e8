"""The policy step every trainer takes, and the trainer that holds it (docs/algorithms.md).

    for each micro-batch of the batch (trainers/micro_batch.py; the whole batch by default):
        log pi, entropy, router logits = one forward of the policy over it (under routing replay,
                                         with the replayed experts: trainers/routing_replay.py)
        L = policy_gradient_loss(log pi, log pi_engine, A; the trainer's PolicyLoss)  trainers/losses.py
            + kl_coef x KL(pi || pi_ref)                                          trainers/reference.py
            + router_aux_loss_coef x L_aux                                        trainers/router_balance.py
        backward, weighted by the micro-batch's share of the batch's action tokens
    clip the gradient to max_grad_norm and step, unless a loss or the gradient is not finite: then
    skip the step whole (trainers/numerics.py)

A trainer (`PolicyTrainer`'s subclasses: trainers/running_mean.py, grpo.py, sao.py) computes the
advantages A and says which PolicyLoss it takes; SAO's critic steps through the same
`guarded_update` with its value loss.

The metrics, one spelling for every trainer: `policy_loss` (the whole loss), `entropy`, the
correction's own (`dis_masked_frac` or `clip_frac`), `ratio_mean`, `approx_kl`, `kl_ref`,
`router_aux_loss`, `policy_grad_norm` and `policy_grad_norm_<family>` (nan for a skipped step),
`policy_expert_load_cv` and `_peak`; a critic's are `critic_`-prefixed alike. Every update adds
`nonfinite`, `skipped_steps`, `reward_mean` and `response_tokens_mean` (`PolicyTrainer.outcome`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from testbed.models.modules import ModulePatterns, moe_shape
from testbed.models.policy import token_logprobs_and_routing
from trainers import data_parallel
from trainers.batching import Batch
from trainers.config import TrainerConfig
from trainers.diagnostics import expert_load, grad_norms_by_family
from trainers.losses import micro_batch_denominator, policy_gradient_loss, token_mean
from trainers.micro_batch import Piece, combine, policy_routing, routed, router_totals, split
from trainers.numerics import guarded_steps
from trainers.reference import reference_for
from trainers.router_balance import with_router_aux
from trainers.routing_replay import replay_for

# (metrics, the non-finite quantity if the step was skipped, else None)
Step = tuple[dict[str, float], str | None]
# micro-batch k -> (its loss, its token-mean metrics, its router logits or None)
PieceLoss = Callable[[int, Piece], tuple[Tensor, dict[str, Any], tuple | None]]


def adamw(params: Iterable[nn.Parameter], lr: float, eps: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, eps=eps)


@dataclass(frozen=True)
class Stepped:
    """A model a trainer steps (the policy, SAO's critic) and what its step needs to know of it."""

    name: str  # "policy" or "critic": the metrics' prefix, the non-finite quantity's subject
    model: nn.Module
    optimizer: torch.optim.Optimizer
    hf_config: Any  # its transformers config: the routed experts, for the load-balancing loss
    route: Callable[[Batch], tuple | None]  # its router logits on a micro-batch, no gradient needed


def guarded_update(
    stepped: Stepped, pieces: list[Piece], loss_of: PieceLoss, cfg: TrainerConfig, patterns: ModulePatterns | None
) -> Step:
    """One guarded optimiser step of `stepped.model` over the batch's micro-batches: each one's loss
    (`loss_of`, computed when asked for, so only one micro-batch's graph is alive) plus the router's
    load-balancing loss, backpropagated with its share of the tokens, then one clipped step
    (trainers/numerics.py). Metrics: the token-weighted means of the micro-batches' own, the
    gradient norms by module family (named by `patterns`) and the experts' load."""
    name, model = stepped.name, stepped.model
    model.train()
    aux = cfg.router_aux_loss_coef
    totals = router_totals(pieces, stepped.route, aux, stepped.hf_config)  # the whole batch's expert counts
    aux_key = "router_aux_loss" if name == "policy" else f"{name}_router_aux_loss"
    parts: list[tuple[float | None, dict[str, Any]]] = []  # per micro-batch: (weight, metrics)
    routing: list[tuple[tuple | None, Tensor]] = []  # per micro-batch: (router logits, action mask)

    def losses() -> Iterator[tuple[Tensor, float | None]]:
        for k, piece in enumerate(pieces):
            mb = piece.batch
            loss, stats, router = loss_of(k, piece)
            loss = with_router_aux(
                loss, stats, aux, router, mb.attention_mask, stepped.hf_config, aux_key, totals, piece.weight
            )
            parts.append((piece.weight, {f"{name}_loss": loss.detach(), **stats}))
            routing.append((router, mb.action_mask))
            yield loss, piece.weight

    norms = {f"{name}_grad_norm": float("nan")}  # stays nan when the loss is (no backward)
    _, nonfinite = guarded_steps(
        losses(),
        model.parameters(),
        stepped.optimizer,
        cfg.max_grad_norm,
        name,
        inspect=lambda: norms.update(grad_norms_by_family(model, f"{name}_", patterns)),
    )
    metrics = {k: float(v) for k, v in combine(parts).items()}
    shape = moe_shape(stepped.hf_config)
    load = expert_load(*routed(routing), shape[1], f"{name}_") if shape else {}
    return {**metrics, **norms, **load}, nonfinite


class PolicyTrainer:
    """What every built-in trainer holds and does alike: its settings (`Config`, a TrainerConfig),
    the policy, the KL reference, the counters, the policy step and the checkpoint. A subclass
    builds the policy's optimiser (`policy_opt`) and adds how it computes advantages."""

    Config: ClassVar[type[TrainerConfig]]
    group_size = 1  # samples per prompt
    micro_batch_tokens: int | None = None  # runtime.micro_batch_tokens (trainers/micro_batch.py)
    module_patterns: ModulePatterns | None = None  # names the module families of the gradient norms
    policy_opt: torch.optim.Optimizer

    def __init__(
        self,
        policy: nn.Module,
        config: dict[str, Any] | None = None,
        /,
        *,
        pad_id: int,
        temperature: float = 1.0,
        seed: int = 0,  # for a trainer's own randomness (SAO's critic head)
        **args: Any,
    ):
        # the loop passes the arm's args as keywords (registry.build); a dict is the same, for direct use
        self.cfg = self.Config.model_validate({**(config or {}), **args})
        self.policy = policy
        self.pad_id = pad_id
        self.temperature = temperature
        self.episodes_per_update = self.cfg.episodes_per_update
        self.loss = self.cfg.loss_settings()
        self.version = 0  # policy updates so far
        self.skipped_steps_total = 0  # optimiser steps skipped for a non-finite loss or gradient
        self.reference = reference_for(policy, self.cfg.kl_coef, temperature)
        shape = moe_shape(getattr(policy, "config", None))
        if self.cfg.routing_replay != "off" and shape is None:
            raise ValueError(f"routing_replay: {self.cfg.routing_replay} needs an MoE policy; this one has no router")
        self.router_top_k = shape[1] if shape else None

    def pieces(self, data: Batch, mask: Tensor | None = None) -> list[Piece]:
        """The batch's micro-batches, weighted by their share of `mask`'s tokens (the action tokens')."""
        return split(data, self.micro_batch_tokens, data.action_mask if mask is None else mask)

    def reference_logprobs(self, pieces: list[Piece]) -> list[Tensor | None]:
        """The KL reference's log-probs of each micro-batch (None without the anchor)."""
        return [None if self.reference is None else self.reference.logprobs(p.batch) for p in pieces]

    def replays(self, pieces: list[Piece]) -> list[Tensor | None]:
        """The expert ids each micro-batch's policy forwards replay (`routing_replay`; None: off)."""
        route = policy_routing(self.policy)
        return [replay_for(self.cfg.routing_replay, route, self.router_top_k, p.batch) for p in pieces]

    def policy_step(
        self,
        pieces: list[Piece],
        advantages: Tensor,
        refs: list[Tensor | None] | None = None,
        replays: list[Tensor | None] | None = None,
    ) -> Step:
        """One policy step on the batch's micro-batches with per-token `advantages` [B, T]; `refs`:
        the reference's log-probs of each, `replays` the expert ids its forwards replay (both
        computed here when not given)."""
        refs = self.reference_logprobs(pieces) if refs is None else refs
        replays = self.replays(pieces) if replays is None else replays
        denominators = self._denominators(pieces)

        def loss_of(k: int, piece: Piece) -> tuple[Tensor, dict[str, Any], tuple | None]:
            mb = piece.batch
            logprobs, entropy, router = token_logprobs_and_routing(
                self.policy, mb.tokens, mb.attention_mask, self.temperature, where=mb.action_mask, forced=replays[k]
            )
            loss, stats = policy_gradient_loss(
                logprobs, mb.behaviour_logprobs, piece.cut(advantages), mb.action_mask, self.loss, denominators[k]
            )
            ref = refs[k]
            if self.reference is not None and ref is not None:
                penalty, stats["kl_ref"] = self.reference.penalty(logprobs, ref, mb)
                loss = loss + penalty
            return loss, {"entropy": token_mean(entropy.detach(), mb.action_mask), **stats}, router

        policy = Stepped("policy", self.policy, self.policy_opt, self.policy.config, policy_routing(self.policy))
        return guarded_update(policy, pieces, loss_of, self.cfg, self.module_patterns)

    def _denominators(self, pieces: list[Piece]) -> list[float | None]:
        """Each micro-batch's aggregation denominator (trainers/losses.py): None for the token mean;
        else its token share of the whole batch's rows and tokens, over every data-parallel rank."""
        if self.loss.aggregation == "token_mean":
            return [None] * len(pieces)
        own = [0.0 if p.stand_in else float(p.batch.action_mask.sum()) for p in pieces]
        rows = sum(p.stop - p.start for p in pieces if not p.stand_in)
        rows_all, tokens_all = data_parallel.all_reduce_sum(torch.tensor([float(rows), sum(own)])).tolist()
        return [micro_batch_denominator(self.loss, rows_all, tokens_all, n) for n in own]

    def outcome(self, data: Batch, skipped: list[str]) -> dict[str, Any]:
        """The metrics every update reports: the trainer protocol's `nonfinite` (the first non-finite
        quantity) and `skipped_steps` (counted in `skipped_steps_total` too), the batch's mean
        reward and response length."""
        self.skipped_steps_total += len(skipped)
        return {
            "nonfinite": skipped[0] if skipped else None,
            "skipped_steps": len(skipped),
            "reward_mean": float(data.episode_rewards.mean()),
            "response_tokens_mean": float(data.action_lengths.float().mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "policy_opt": self.policy_opt.state_dict(),
            "version": self.version,
            "skipped_steps_total": self.skipped_steps_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        # the running mean's and GRPO's older checkpoints name it "optimizer"
        self.policy_opt.load_state_dict(state["policy_opt"] if "policy_opt" in state else state["optimizer"])
        self.version = state["version"]
        self.skipped_steps_total = state.get("skipped_steps_total", 0)  # absent in older checkpoints
