"""GRPO (docs/algorithms.md): G rollouts per prompt, group-normalised advantages
A_i = (R_i - mean_j R_j) / (std_j R_j + eps) (or RLOO: R_i - mean_{j!=i} R_j) broadcast to the
tokens, and the PPO-clip loss against the policy that generated the batch (or, with
`policy_loss: dis`, SAO's DIS loss against the same behaviour log-probs: "GRPO with DIS", the
setting the SAO paper compares against at 16 prompts x 8). An update takes
`episodes_per_update` judged episodes, whole groups of `group_size` (so the prompts per update are
their quotient): the one size field every trainer has, so a sweep sets every arm's batch alike.

With G = 1 every advantage is exactly zero: in an online setting that returns one feedback per
prompt, GRPO cannot learn. The trainer says so plainly and still runs (the flat curve is the point).
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.device import of as device_of
from testbed.models.policy import token_logprobs_and_routing
from testbed.types import Trajectory
from trainers.baselines import broadcast_to_tokens, group_advantages
from trainers.batching import collate
from trainers.diagnostics import expert_load, grad_norms_by_family
from trainers.losses import dis_policy_loss, ppo_clip_loss, token_mean
from trainers.micro_batch import Piece, combine, policy_routing, routed, router_totals, split
from trainers.numerics import guarded_steps
from trainers.reference import reference_for
from trainers.renamed import refuse_renamed
from trainers.router_balance import with_router_aux

G1_WARNING = (
    "GRPO with group_size=1: group-relative advantages are identically zero when each prompt gets a "
    "single feedback, so the policy will not learn. Use group_size > 1 where the environment can "
    "re-sample a prompt (every extra sample is a judge call)."
)


def episodes_hint(prompts: Any, group: Any) -> str:
    """The new spelling of the old `prompts_per_update`: the update's episodes, prompts x group_size."""
    if isinstance(prompts, int) and isinstance(group, int):
        return f"episodes_per_update: {prompts * group} (prompts_per_update x group_size = {prompts} x {group})"
    return "episodes_per_update: prompts_per_update x group_size"


class GRPOConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an inf lr would NaN the policy

    group_size: int = Field(8, ge=1, description="G rollouts per prompt, each judged (and counted)")
    episodes_per_update: int = Field(
        32,
        ge=1,
        description=(
            "judged episodes per update: whole groups, so a multiple of group_size (prompts per update x group_size)"
        ),
    )
    lr: float = Field(2e-4, gt=0)
    advantage: Literal["grpo", "rloo"] = "grpo"
    policy_loss: Literal["ppo_clip", "dis"] = Field(
        "ppo_clip",
        description="'dis': SAO's DIS (tokens whose ratio to the engine's log-probs leaves the band get weight 0)",
    )
    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0)
    eps_low: float = Field(0.3, gt=0, lt=1, description="DIS band's lower side (policy_loss: dis)")
    eps_high: float = Field(5.0, gt=0, description="DIS band's upper side (policy_loss: dis)")
    epochs: int = Field(1, ge=1, description="PPO epochs over each batch")
    max_grad_norm: float = Field(1.0, gt=0)
    adam_eps: float = Field(1e-8, gt=0, description="Adam's epsilon (RL code often uses 1e-5)")
    kl_coef: float = Field(0.0, ge=0, description="KL anchor to the starting (SFT) policy; 0 = none, as in the paper")
    router_aux_loss_coef: float = Field(
        0.0, ge=0, description="MoE load-balancing loss (Switch/Mixtral) weight; 0 = off"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, args: Any) -> Any:
        default = cls.model_fields["group_size"].default
        return refuse_renamed(
            args,
            {"prompts_per_update": lambda prompts, given: episodes_hint(prompts, given.get("group_size", default))},
        )

    @model_validator(mode="after")
    def _whole_groups(self) -> GRPOConfig:
        epu, group = self.episodes_per_update, self.group_size
        if epu % group:
            below, above = epu // group * group, (epu // group + 1) * group
            raise ValueError(
                f"episodes_per_update ({epu}) is not a multiple of group_size ({group}): an update takes whole "
                f"groups of {group} samples of a prompt; use {f'{below} or ' if below else ''}{above}"
            )
        return self


class GRPOTrainer:
    Config = GRPOConfig
    micro_batch_tokens: int | None = None  # runtime.micro_batch_tokens (trainers/micro_batch.py)

    def __init__(
        self,
        policy: torch.nn.Module,
        config: dict[str, Any] | None = None,
        /,
        *,
        pad_id: int,
        temperature: float = 1.0,
        seed: int = 0,
        **args: Any,
    ):
        # the loop passes the arm's args as keywords (registry.build); a dict is the same, for direct use
        self.cfg = GRPOConfig.model_validate({**(config or {}), **args})
        self.policy = policy
        self.pad_id = pad_id
        self.temperature = temperature
        self.group_size = self.cfg.group_size
        self.episodes_per_update = self.cfg.episodes_per_update
        self.top_k = policy.config.num_experts_per_tok
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=0.0, eps=self.cfg.adam_eps)
        self.version = 0
        self.skipped_steps_total = 0  # optimiser steps skipped for a non-finite loss or gradient
        self.reference = reference_for(policy, self.cfg.kl_coef, temperature)
        if self.group_size == 1:
            warnings.warn(G1_WARNING, stacklevel=2)

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))
        per_episode = group_advantages(data.episode_rewards, [t.group_id for t in batch], kind=self.cfg.advantage)
        advantages = broadcast_to_tokens(per_episode, data.action_mask)
        metrics: dict[str, float] = {}
        stepped, nonfinite = False, None
        # Advantages over whole groups above; micro-batches only slice rows of them.
        pieces = split(data, self.micro_batch_tokens, data.action_mask)
        refs = [self.reference.logprobs(p.batch) if self.reference is not None else None for p in pieces]
        for _ in range(self.cfg.epochs):
            metrics, nonfinite = self._epoch(pieces, advantages, refs)
            if nonfinite is not None:
                # Same batch, same parameters: the remaining epochs would fail the same way.
                self.skipped_steps_total += 1
                break
            stepped = True
        if stepped:  # the version moves with the parameters, even if a later epoch was skipped
            self.version += 1
        groups = {t.group_id for t in batch}
        zero = (per_episode == 0).tolist()  # one copy from the device, not one per episode
        return {
            **metrics,
            "nonfinite": nonfinite,
            "skipped_steps": int(nonfinite is not None),
            "reward_mean": float(data.episode_rewards.mean()),
            "advantage_abs_mean": float(per_episode.abs().mean()),
            "zero_advantage_groups": float(
                sum(1 for g in groups if all(zero[i] for i, t in enumerate(batch) if t.group_id == g)) / len(groups)
            ),
            "response_tokens_mean": float(data.action_lengths.float().mean()),
        }

    def policy_loss(
        self, logprobs: torch.Tensor, behaviour: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """PPO clip (the default) or DIS, both against the log-probs the engine recorded."""
        if self.cfg.policy_loss == "dis":
            return dis_policy_loss(logprobs, behaviour, advantages, mask, self.cfg.eps_low, self.cfg.eps_high)
        return ppo_clip_loss(logprobs, behaviour, advantages, mask, self.cfg.clip_low, self.cfg.clip_high)

    def _epoch(
        self, pieces: list[Piece], advantages: torch.Tensor, refs: list[torch.Tensor | None]
    ) -> tuple[dict[str, float], str | None]:
        """One PPO epoch: a step on the batch's micro-batches (metrics, the non-finite quantity if skipped)."""
        self.policy.train()
        parts: list = []  # per micro-batch: (weight, metrics)
        routing: list = []  # per micro-batch: (router logits, action mask)
        totals = router_totals(  # the router loss's whole-batch counts, when micro-batched
            pieces,
            policy_routing(self.policy),
            self.cfg.router_aux_loss_coef,
            self.policy.config,
        )

        def losses():  # one micro-batch's forward at a time (the whole batch without micro_batch_tokens)
            for piece, ref_logprobs in zip(pieces, refs):
                mb = piece.batch
                logprobs, entropy, router = token_logprobs_and_routing(
                    self.policy, mb.tokens, mb.attention_mask, self.temperature, where=mb.action_mask
                )
                loss, stats = self.policy_loss(logprobs, mb.behaviour_logprobs, piece.cut(advantages), mb.action_mask)
                if self.reference is not None:
                    penalty, stats["kl_ref"] = self.reference.penalty(logprobs, ref_logprobs, mb)
                    loss = loss + penalty
                loss = with_router_aux(
                    loss,
                    stats,
                    self.cfg.router_aux_loss_coef,
                    router,
                    mb.attention_mask,
                    self.policy.config,
                    totals=totals,
                    share=piece.weight,
                )
                entropy_mean = token_mean(entropy.detach(), mb.action_mask)
                parts.append((piece.weight, {"policy_loss": loss.detach(), "entropy": entropy_mean, **stats}))
                routing.append((router, mb.action_mask))
                yield loss, piece.weight

        norms = {"policy_grad_norm": float("nan")}  # stays nan when the loss is (no backward)
        _, nonfinite = guarded_steps(
            losses(),
            self.policy.parameters(),
            self.optimizer,
            self.cfg.max_grad_norm,
            "policy",
            inspect=lambda: norms.update(grad_norms_by_family(self.policy, "policy_")),
        )
        metrics = {k: float(v) for k, v in combine(parts).items()}
        return {**metrics, **norms, **expert_load(*routed(routing), self.top_k, "policy_")}, nonfinite

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "skipped_steps_total": self.skipped_steps_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]
        self.skipped_steps_total = state.get("skipped_steps_total", 0)  # absent in older checkpoints
