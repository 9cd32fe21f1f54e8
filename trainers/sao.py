"""SAO: single-rollout asynchronous optimisation (docs/algorithms.md, where each formula is written out).

One rollout per prompt and a critic, made stable by four designs. Where each piece is computed:

  1. faster value updates (TTUR): K critic updates per policy update and a larger critic lr
       -> `SAOTrainer.update` (the K loop), `SAOConfig.value_updates_per_policy_update`, `critic_lr`
  2. a frozen-attention MoE critic: the policy's architecture + Linear(hidden, 1), attention frozen
       -> `testbed.models.critic.Critic.from_policy` (`critic_trainable: moe | all | lora`)
  3. observation-skipping token-level GAE over action tokens only,
       delta_t = r_t + gamma V(t+1) - V(t),  A_t = delta_t + gamma lambda A_{t+1}  (one gamma*lambda
       step across an observation; V after the last action token = 0)
       -> `trainers.advantages.gae_token_level` (step-level ablations: `gae_step_level`)
     decoupled lambdas: critic targets with lambda_critic = 1, policy advantages with
       lambda_policy = 1 - 1/(alpha * l)  -> `length_adaptive_lambda`, `policy_and_critic_advantages`
  4. value pretraining on Monte-Carlo returns of the fixed SFT policy, then a value warm-up with
     the policy frozen  -> `trainers.value_pretrain.pretrain_values` (the trainer protocol's warm-up hook
     `SAOTrainer.warmup`), `value_warmup_updates`
Value loss 0.5 * token_mean[(V - G)^2] (optional clipping) -> `trainers.losses.value_loss`.
Advantage order (`advantages_from`): from the critic after its K steps (default, the paper's "catch up
  before it is used"), or from the critic before it saw the batch; every update logs how much the K
  steps shrank |A| (`trainers.diagnostics.advantage_shrinkage`).
Policy loss DIS against the rollout engine's own log-probs, r = exp(log pi - log pi_rollout),
  L = -token_mean[sg(f(r)) A log pi], f(r) = r inside (1 - eps_low, 1 + eps_high), else 0
  -> `trainers.losses.dis_policy_loss`; vanilla VAPO (`policy_loss: ppo_clip`) -> `ppo_clip_loss`.
Optional: the KL anchor to the SFT policy (`kl_coef`, `trainers.reference`), the router
load-balancing loss (`router_aux_loss_coef`). Rollouts too stale to train on never reach the
trainer: the runtime drops them (`runtime.max_staleness`).

Every ablation of the paper's Table 4 is a switch in `SAOConfig` (`trainers.sao_config`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch

from testbed.device import of as device_of
from testbed.models.critic import Critic, trainable_parameter_counts
from testbed.models.policy import token_logprobs_and_routing
from testbed.types import Trajectory
from trainers.advantages import critic_mask, length_adaptive_lambda, policy_and_critic_advantages
from trainers.batching import Batch, collate
from trainers.diagnostics import advantage_shrinkage, expert_load, first_value_metrics, grad_norms_by_family
from trainers.losses import dis_policy_loss, explained_variance, ppo_clip_loss, token_mean, value_loss
from trainers.micro_batch import Piece, combine, policy_routing, routed, router_totals, scatter_rows, split
from trainers.numerics import guarded_steps
from trainers.reference import reference_for
from trainers.router_balance import with_router_aux
from trainers.sao_config import SAOConfig
from trainers.value_pretrain import pretrain_values, pretrained_critic_key

__all__ = ["SAOConfig", "SAOTrainer"]


class SAOTrainer:
    Config = SAOConfig
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
        self.cfg = SAOConfig.model_validate({**(config or {}), **args})
        self.policy = policy
        self.pad_id = pad_id
        self.temperature = temperature
        self.episodes_per_update = self.cfg.episodes_per_update
        self.top_k = policy.config.num_experts_per_tok
        self.critic = Critic.from_policy(
            policy,
            self.cfg.critic_trainable,
            self.cfg.critic_train_embeddings_norms,
            self.cfg.critic_module_patterns,
            lora_r=self.cfg.critic_lora_r,
            lora_alpha=self.cfg.critic_lora_alpha,
            seed=seed,
        )
        self.policy_opt = torch.optim.AdamW(
            policy.parameters(), lr=self.cfg.policy_lr, weight_decay=0.0, eps=self.cfg.adam_eps
        )
        self.critic_opt = torch.optim.AdamW(
            [p for p in self.critic.parameters() if p.requires_grad],
            lr=self.cfg.critic_lr,
            weight_decay=0.0,
            eps=self.cfg.adam_eps,
        )
        self.version = 0  # policy updates so far
        self.updates = 0  # all updates, warm-up included
        self.skipped_steps_total = 0  # optimiser steps (critic and policy) skipped for a non-finite loss or gradient
        self.rng = random.Random(seed)
        self.reference = reference_for(policy, self.cfg.kl_coef, temperature)
        self.parameter_counts = trainable_parameter_counts(
            self.critic, self.cfg.critic_module_patterns
        )  # logged at start

    # -- the update ---------------------------------------------------------------------------

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))

        critic_pieces = split(data, self.micro_batch_tokens, critic_mask(data.action_mask, self.cfg.gae))
        # Values before this batch's critic updates: their explained variance is out of sample.
        # They come from the first critic step's own forward (same parameters, same batch), so
        # that pass is not run twice (micro-batched: a no-grad pass over the micro-batches).
        self.critic.train()
        first_forward = None if self.micro_batch_tokens else self.critic(data.tokens, data.attention_mask, True)
        values_before = self._values(data, critic_pieces) if first_forward is None else first_forward[0].detach()
        advantages_pre, returns = self._advantages(data, values_before)
        metrics: dict[str, Any] = {
            "value_explained_variance": explained_variance(
                values_before, returns, critic_mask(data.action_mask, self.cfg.gae)
            ),
            **first_value_metrics(values_before, data.action_mask, data.episode_rewards),
        }
        skipped: list[str] = []  # the non-finite quantity of each skipped step, in order

        # 1. TTUR: K critic updates, so values are fresh before they shape the advantages.
        for k in range(self.cfg.value_updates_per_policy_update):
            step_metrics, nonfinite = self._critic_step(
                data, returns, values_before, forward=first_forward if k == 0 else None, pieces=critic_pieces
            )
            metrics.update(step_metrics)
            if nonfinite is not None:
                skipped.append(nonfinite)
                break  # same batch, same critic: the remaining critic steps would fail the same way

        # 2. Advantages (observation-skipping GAE, decoupled lambda) from the critic after its K
        # steps ("fitted") or before them ("pre_update").
        values, advantages = self._scoring_advantages(data, values_before, advantages_pre, metrics, critic_pieces)

        # 3. The policy step, unless still in the value warm-up.
        self.updates += 1
        if self.updates > self.cfg.value_warmup_updates:
            step_metrics, nonfinite = self._policy_step(data, advantages)
            metrics.update(step_metrics)
            if nonfinite is None:
                self.version += 1
            else:
                skipped.append(nonfinite)
        else:
            metrics["value_warmup"] = 1.0
        self.skipped_steps_total += len(skipped)
        metrics.update(
            {
                "nonfinite": skipped[0] if skipped else None,
                "skipped_steps": len(skipped),
                "reward_mean": float(data.episode_rewards.mean()),
                "value_mean": float(token_mean(values, data.action_mask)),
                "advantage_mean": float(token_mean(advantages, data.action_mask)),
                "advantage_abs_mean": float(token_mean(advantages.abs(), data.action_mask)),
                "response_tokens_mean": float(data.action_lengths.float().mean()),
            }
        )
        return metrics

    @torch.no_grad()
    def _values(self, data: Batch, pieces: list[Piece]) -> torch.Tensor:
        """The critic's values [B, T] over the batch, one micro-batch at a time."""
        if len(pieces) == 1 and pieces[0].weight is None:
            return self.critic(data.tokens, data.attention_mask)[0]
        values = [self.critic(p.batch.tokens, p.batch.attention_mask)[0] for p in pieces]
        return scatter_rows(pieces, values, data.rewards)

    def _scoring_advantages(
        self,
        data: Batch,
        values_before: torch.Tensor,
        advantages_pre: torch.Tensor,
        metrics: dict[str, Any],
        pieces: list[Piece],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, advantages) the policy step uses, per `advantages_from`. The fitted critic's are
        computed either way, to log how much fitting it to this batch shrank the advantages."""
        values_fitted = self._values(data, pieces)
        advantages_fitted, _ = self._advantages(data, values_fitted)
        metrics.update(advantage_shrinkage(advantages_pre, advantages_fitted, data.action_mask, data.episode_rewards))
        if self.cfg.advantages_from == "fitted":
            return values_fitted, advantages_fitted
        return values_before, advantages_pre

    def _advantages(self, data: Batch, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.lambda_policy == "adaptive":
            lam_policy = length_adaptive_lambda(data.action_lengths, self.cfg.alpha)
        else:
            lam_policy = float(self.cfg.lambda_policy)
        return policy_and_critic_advantages(
            data.rewards, values, data.action_mask, self.cfg.gamma, lam_policy, self.cfg.lambda_critic, self.cfg.gae
        )

    def _critic_step(
        self,
        data: Batch,
        returns: torch.Tensor,
        old_values: torch.Tensor,
        forward: tuple[torch.Tensor, tuple | None] | None = None,
        pieces: list[Piece] | None = None,
    ) -> tuple[dict[str, float], str | None]:
        """One critic step: (metrics, the non-finite quantity if the step was skipped). `forward`:
        the critic's (values, router logits) on this batch at its current parameters, if the
        caller already has them (with their graph). `pieces`: the batch's micro-batches."""
        self.critic.train()
        parts: list = []  # per micro-batch: (weight, metrics)
        routing: list = []  # per micro-batch: (router logits, action mask)
        pieces = pieces or split(data, None, data.action_mask)
        losses = self._critic_losses(pieces, returns, old_values, forward, parts, routing)
        norms = {"critic_grad_norm": float("nan")}  # stays nan when the loss is (no backward)
        _, nonfinite = guarded_steps(
            losses,
            self.critic.parameters(),
            self.critic_opt,
            self.cfg.max_grad_norm,
            "critic",
            inspect=lambda: norms.update(grad_norms_by_family(self.critic, "critic_", self.cfg.critic_module_patterns)),
        )
        metrics = {k: float(v) for k, v in combine(parts).items()} | norms
        return metrics | expert_load(*routed(routing), self.top_k, "critic_"), nonfinite

    def _critic_losses(
        self,
        pieces: list[Piece],
        returns: torch.Tensor,
        old_values: torch.Tensor,
        forward: tuple[torch.Tensor, tuple | None] | None,
        parts: list,
        routing: list,
    ) -> Iterator[tuple[torch.Tensor, Any]]:
        """(value loss, share) of each micro-batch, one forward at a time when asked for; each one's
        metrics appended to `parts`, its router logits to `routing`."""
        totals = router_totals(  # the router loss's whole-batch counts, when micro-batched
            pieces,
            lambda mb: self.critic(mb.tokens, mb.attention_mask, output_router_logits=True)[1],
            self.cfg.router_aux_loss_coef,
            self.critic.backbone.config,
        )
        for piece in pieces:
            mb = piece.batch
            if forward is None:
                values, router = self.critic(mb.tokens, mb.attention_mask, output_router_logits=True)
            else:
                values, router = forward
            loss = value_loss(
                values,
                piece.cut(returns),
                critic_mask(mb.action_mask, self.cfg.gae),
                old_values=piece.cut(old_values) if self.cfg.value_clip else None,
                clip=self.cfg.value_clip,
            )
            stats: dict[str, Any] = {"critic_loss": 0.0, "critic_grad_norm": 0.0}  # (the metrics' order)
            loss = with_router_aux(
                loss,
                stats,
                self.cfg.router_aux_loss_coef,
                router,
                mb.attention_mask,
                self.critic.backbone.config,
                "critic_router_aux_loss",
                totals,
                piece.weight,
            )
            parts.append((piece.weight, {**stats, "critic_loss": loss.detach()}))
            routing.append((router, mb.action_mask))
            yield loss, piece.weight

    def _policy_step(self, data: Batch, advantages: torch.Tensor) -> tuple[dict[str, float], str | None]:
        """The policy step: (metrics, the non-finite quantity if the step was skipped)."""
        self.policy.train()
        parts: list = []  # per micro-batch: (weight, metrics)
        routing: list = []  # per micro-batch: (router logits, action mask)
        pieces = split(data, self.micro_batch_tokens, data.action_mask)
        totals = router_totals(  # the router loss's whole-batch counts, when micro-batched
            pieces,
            policy_routing(self.policy),
            self.cfg.router_aux_loss_coef,
            self.policy.config,
        )

        def losses():  # one micro-batch's forward at a time (the whole batch without micro_batch_tokens)
            for piece in pieces:
                mb, adv = piece.batch, piece.cut(advantages)
                logprobs, entropy, router = token_logprobs_and_routing(
                    self.policy, mb.tokens, mb.attention_mask, self.temperature, where=mb.action_mask
                )
                if self.cfg.policy_loss == "dis":
                    loss, stats = dis_policy_loss(
                        logprobs, mb.behaviour_logprobs, adv, mb.action_mask, self.cfg.eps_low, self.cfg.eps_high
                    )
                else:  # vanilla VAPO: PPO clip against the policy that generated the batch
                    loss, stats = ppo_clip_loss(
                        logprobs, mb.behaviour_logprobs, adv, mb.action_mask, self.cfg.clip_low, self.cfg.clip_high
                    )
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
                routing.append((router, mb.action_mask))
                yield loss, piece.weight

        norms = {"policy_grad_norm": float("nan")}  # stays nan when the loss is (no backward)
        _, nonfinite = guarded_steps(
            losses(),
            self.policy.parameters(),
            self.policy_opt,
            self.cfg.max_grad_norm,
            "policy",
            inspect=lambda: norms.update(grad_norms_by_family(self.policy, "policy_", self.cfg.critic_module_patterns)),
        )
        metrics = {k: float(v) for k, v in combine(parts).items()}
        return {**metrics, **norms, **expert_load(*routed(routing), self.top_k, "policy_")}, nonfinite

    # -- value pretraining (trainers/value_pretrain.py) ----------------------------------------

    @property
    def warmup_samples(self) -> int:
        """The trainer protocol's warm-up hook: value pretraining wants this many judged samples."""
        return self.cfg.value_pretrain_samples

    def warmup(self, trajectories: list[Trajectory], on_step: Callable[..., None] | None = None) -> dict[str, Any]:
        """Value pretraining (`trainers.value_pretrain.pretrain_values`): the loss and explained
        variance after each epoch, and after each critic step to `on_step`."""
        curve, skipped = pretrain_values(
            trajectories, self.cfg, self.critic, self._critic_step, self.rng, self.pad_id, on_step
        )
        self.skipped_steps_total += skipped
        return {
            "samples": len(trajectories),
            "curve": curve,
            "parameters": self.parameter_counts,
            "skipped_steps": skipped,
        }

    def warmup_key(self) -> dict[str, Any]:
        """The settings that determine the pretrained critic (the loop caches it under these)."""
        return pretrained_critic_key(self.cfg)

    def warmup_state(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "critic_opt": self.critic_opt.state_dict()}

    def load_warmup_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_opt.load_state_dict(state["critic_opt"])

    # -- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "policy_opt": self.policy_opt.state_dict(),
            **self.warmup_state(),
            "version": self.version,
            "updates": self.updates,
            "skipped_steps_total": self.skipped_steps_total,
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.policy_opt.load_state_dict(state["policy_opt"])
        self.load_warmup_state(state)
        self.version, self.updates = (
            state["version"],
            state["updates"],
        )  # an older checkpoint's "dropped_stale" is unused
        self.skipped_steps_total = state.get("skipped_steps_total", 0)  # absent in older checkpoints
        self.rng.setstate(state["rng"])
