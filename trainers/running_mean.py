"""The running-mean baseline (docs/algorithms.md): REINFORCE on single rollouts with a sliding window of the
most recent rewards as the baseline,

    A = r - mean(r over the last `window` rewards, this one included),

broadcast to every action token. The loss is DIS against the engine's log-probs by default, or
plain REINFORCE.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.device import of as device_of
from testbed.models.policy import token_logprobs_and_routing
from testbed.types import Trajectory
from trainers.baselines import SlidingWindowBaseline, broadcast_to_tokens
from trainers.batching import Batch, collate
from trainers.data_parallel import full_batch
from trainers.losses import dis_policy_loss, reinforce_loss, token_mean
from trainers.micro_batch import combine, policy_routing, router_totals, split
from trainers.numerics import guarded_steps
from trainers.reference import reference_for
from trainers.renamed import refuse_renamed, renamed_to
from trainers.router_balance import with_router_aux


class RunningMeanConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an inf lr would NaN the policy

    episodes_per_update: int = Field(32, ge=1, description="single rollouts per policy update (each a judged episode)")
    window: int = Field(128, ge=1, description="rewards in the sliding-window baseline")
    per_prompt: bool = Field(False, description="one window per prompt (Table 4 variant) instead of global")
    lr: float = Field(2e-3, gt=0)
    loss: Literal["dis", "reinforce"] = "dis"
    eps_low: float = Field(0.3, gt=0, lt=1)
    eps_high: float = Field(5.0, gt=0)
    max_grad_norm: float = Field(1.0, gt=0)
    adam_eps: float = Field(1e-8, gt=0, description="Adam's epsilon (RL code often uses 1e-5)")
    kl_coef: float = Field(0.0, ge=0, description="KL anchor to the starting (SFT) policy; 0 = none, as in the paper")
    router_aux_loss_coef: float = Field(
        0.0, ge=0, description="MoE load-balancing loss (Switch/Mixtral) weight; 0 = off"
    )

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, args: Any) -> Any:
        return refuse_renamed(args, {"batch_size": renamed_to("episodes_per_update")})


class RunningMeanTrainer:
    Config = RunningMeanConfig
    group_size = 1
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
        self.cfg = RunningMeanConfig.model_validate({**(config or {}), **args})
        self.policy = policy
        self.pad_id = pad_id
        self.temperature = temperature
        self.episodes_per_update = self.cfg.episodes_per_update
        self.baseline = SlidingWindowBaseline(size=self.cfg.window, per_prompt=self.cfg.per_prompt)
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=0.0, eps=self.cfg.adam_eps)
        self.version = 0
        self.skipped_steps_total = 0  # optimiser steps skipped for a non-finite loss or gradient
        self.reference = reference_for(policy, self.cfg.kl_coef, temperature)

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))
        baseline_before = self.baseline.state_dict()
        # The window runs over the whole batch in order, also when this is one data-parallel shard.
        per_episode = full_batch(
            self.baseline.advantages,
            [t.reward for t in batch],
            [t.prompt_id for t in batch] if self.cfg.per_prompt else None,
        )
        advantages = broadcast_to_tokens(
            torch.tensor(per_episode, dtype=torch.float, device=data.tokens.device), data.action_mask
        )

        self.policy.train()
        parts: list = []  # per micro-batch: (weight, metrics)
        grad_norm, nonfinite = guarded_steps(
            self._losses(data, advantages, parts),
            self.policy.parameters(),
            self.optimizer,
            self.cfg.max_grad_norm,
            "policy",
        )
        stats = combine(parts)
        if nonfinite is None:
            self.version += 1
        else:
            # The batch is dropped whole: a nan reward left in the window would poison the
            # advantages of the next `window` rewards.
            self.baseline.load_state_dict(baseline_before)
            self.skipped_steps_total += 1
        return {
            "nonfinite": nonfinite,
            "skipped_steps": int(nonfinite is not None),
            "policy_loss": float(stats.pop("policy_loss")),
            "grad_norm": float(grad_norm),
            "entropy": float(stats.pop("entropy")),
            "reward_mean": float(data.episode_rewards.mean()),
            "baseline": float(data.episode_rewards.mean().cpu() - torch.tensor(per_episode).mean()),
            "advantage_abs_mean": float(torch.tensor(per_episode).abs().mean()),
            "response_tokens_mean": float(data.action_lengths.float().mean()),
            **{k: float(v) for k, v in stats.items()},
        }

    def _losses(self, data: Batch, advantages: torch.Tensor, parts: list) -> Iterator[tuple[torch.Tensor, Any]]:
        """(loss, share) of each micro-batch, one forward at a time when asked for (the whole batch
        without micro_batch_tokens); each one's metrics appended to `parts`."""
        pieces = split(data, self.micro_batch_tokens, data.action_mask)
        # the router loss's whole-batch counts, when micro-batched
        totals = router_totals(pieces, policy_routing(self.policy), self.cfg.router_aux_loss_coef, self.policy.config)
        for piece in pieces:
            mb = piece.batch
            logprobs, entropy, router = token_logprobs_and_routing(
                self.policy,
                mb.tokens,
                mb.attention_mask,
                self.temperature,
                routing=self.cfg.router_aux_loss_coef > 0,
                where=mb.action_mask,
            )
            adv = piece.cut(advantages)
            if self.cfg.loss == "dis":
                loss, stats = dis_policy_loss(
                    logprobs, mb.behaviour_logprobs, adv, mb.action_mask, self.cfg.eps_low, self.cfg.eps_high
                )
            else:
                loss, stats = reinforce_loss(logprobs, adv, mb.action_mask), {}
            if self.reference is not None:
                penalty, stats["kl_ref"] = self.reference.penalty(logprobs, self.reference.logprobs(mb), mb)
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
            yield loss, piece.weight

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": self.baseline.state_dict(),
            "version": self.version,
            "skipped_steps_total": self.skipped_steps_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline.load_state_dict(state["baseline"])
        self.version = state["version"]
        self.skipped_steps_total = state.get("skipped_steps_total", 0)  # absent in older checkpoints
