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
  -> `trainers.losses.policy_gradient_loss` (correction `dis`; vanilla VAPO, `policy_loss: ppo_clip`:
  `ppo_clip`), in the step every trainer takes (`trainers.policy_step`) with the optional KL anchor
  to the SFT policy (`kl_coef`) and router load-balancing loss (`router_aux_loss_coef`); the critic's
  steps go through the same machinery. Rollouts too stale to train on never reach the trainer: the
  runtime drops them (`runtime.max_staleness`).

Every ablation of the paper's Table 4 is a switch in `SAOConfig` (`trainers.sao_config`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from testbed.device import of as device_of
from testbed.models.critic import Critic, trainable_parameter_counts
from testbed.types import Trajectory
from trainers.advantages import critic_mask, length_adaptive_lambda, policy_and_critic_advantages
from trainers.batching import Batch, collate
from trainers.diagnostics import advantage_shrinkage, first_value_metrics
from trainers.losses import explained_variance, token_mean, value_loss
from trainers.micro_batch import Piece, scatter_rows
from trainers.policy_step import PolicyTrainer, Step, Stepped, adamw, guarded_update
from trainers.routing_replay import own_routing
from trainers.sao_config import SAOConfig
from trainers.value_pretrain import pretrain_values, pretrained_critic_key

__all__ = ["SAOConfig", "SAOTrainer"]

# the critic's (values, router logits) on a batch, with their graph
CriticForward = tuple[torch.Tensor, tuple | None]


class SAOTrainer(PolicyTrainer):
    Config = SAOConfig
    cfg: SAOConfig

    def __init__(
        self, policy: torch.nn.Module, config: dict[str, Any] | None = None, /, *, seed: int = 0, **kwargs: Any
    ):
        super().__init__(policy, config, seed=seed, **kwargs)
        cfg = self.cfg
        self.module_patterns = cfg.critic_module_patterns
        self.critic = Critic.from_policy(
            policy,
            cfg.critic_trainable,
            cfg.critic_train_embeddings_norms,
            cfg.critic_module_patterns,
            lora_r=cfg.critic_lora_r,
            lora_alpha=cfg.critic_lora_alpha,
            seed=seed,
        )
        self.policy_opt = adamw(policy.parameters(), cfg.policy_lr, cfg.adam_eps)
        self.critic_opt = adamw([p for p in self.critic.parameters() if p.requires_grad], cfg.critic_lr, cfg.adam_eps)
        self.updates = 0  # all updates, warm-up included (`version` counts the policy's)
        self.rng = random.Random(seed)
        self.parameter_counts = trainable_parameter_counts(self.critic, cfg.critic_module_patterns)  # logged at start

    # -- the update ---------------------------------------------------------------------------

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))
        critic_pieces = self.pieces(data, critic_mask(data.action_mask, self.cfg.gae))

        # Values before this batch's critic updates: their explained variance is out of sample.
        # They come from the first critic step's own forward (same parameters, same batch), so
        # that pass is not run twice (micro-batched: a no-grad pass over the micro-batches).
        self.critic.train()
        first_forward = None if self.micro_batch_tokens else self.critic(data.tokens, data.attention_mask, True)
        values_before = self._values(data, critic_pieces) if first_forward is None else first_forward[0].detach()
        critic_replays = self._critic_replays(critic_pieces, first_forward)
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
                data,
                returns,
                values_before,
                forward=first_forward if k == 0 else None,
                pieces=critic_pieces,
                replays=critic_replays,
            )
            metrics.update(step_metrics)
            if nonfinite is not None:
                skipped.append(nonfinite)
                break  # same batch, same critic: the remaining critic steps would fail the same way

        # 2. Advantages (observation-skipping GAE, decoupled lambda) from the critic after its K
        # steps ("fitted") or before them ("pre_update").
        values, advantages = self._scoring_advantages(
            data, values_before, advantages_pre, metrics, critic_pieces, critic_replays
        )

        # 3. The policy step, unless still in the value warm-up.
        self.updates += 1
        if self.updates > self.cfg.value_warmup_updates:
            step_metrics, nonfinite = self.policy_step(self.pieces(data), advantages)
            metrics.update(step_metrics)
            if nonfinite is None:
                self.version += 1
            else:
                skipped.append(nonfinite)
        else:
            metrics["value_warmup"] = 1.0
        return {
            **metrics,
            **self.outcome(data, skipped),
            "value_mean": float(token_mean(values, data.action_mask)),
            "advantage_mean": float(token_mean(advantages, data.action_mask)),
            "advantage_abs_mean": float(token_mean(advantages.abs(), data.action_mask)),
        }

    @torch.no_grad()
    def _values(
        self, data: Batch, pieces: list[Piece], replays: list[torch.Tensor | None] | None = None
    ) -> torch.Tensor:
        """The critic's values [B, T] over the batch, one micro-batch at a time (`replays`: the
        expert ids each micro-batch's forward replays)."""
        replays = replays or [None] * len(pieces)
        if len(pieces) == 1 and pieces[0].weight is None:
            return self.critic(data.tokens, data.attention_mask, forced=replays[0])[0]
        values = [self.critic(p.batch.tokens, p.batch.attention_mask, forced=r)[0] for p, r in zip(pieces, replays)]
        return scatter_rows(pieces, values, data.rewards)

    def _critic_replays(self, pieces: list[Piece], first: CriticForward | None) -> list[torch.Tensor | None]:
        """Under routing replay the critic replays its own routing at the start of the update (r2)
        through its K steps and the advantages' pass, under r3 too: no engine routes the critic, so
        there is no rollout routing to give it. `first`: its forward on the whole batch, if run."""
        if self.cfg.routing_replay == "off" or self.router_top_k is None:
            return [None] * len(pieces)
        if first is not None:
            return [own_routing(lambda _: first[1], pieces[0].batch, self.router_top_k)]
        return [own_routing(self._critic_routing, p.batch, self.router_top_k) for p in pieces]

    def _scoring_advantages(
        self,
        data: Batch,
        values_before: torch.Tensor,
        advantages_pre: torch.Tensor,
        metrics: dict[str, Any],
        pieces: list[Piece],
        replays: list[torch.Tensor | None] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, advantages) the policy step uses, per `advantages_from`. The fitted critic's are
        computed either way, to log how much fitting it to this batch shrank the advantages."""
        values_fitted = self._values(data, pieces, replays)
        advantages_fitted, _ = self._advantages(data, values_fitted)
        metrics.update(advantage_shrinkage(advantages_pre, advantages_fitted, data.action_mask, data.episode_rewards))
        if self.cfg.advantages_from == "fitted":
            return values_fitted, advantages_fitted
        return values_before, advantages_pre

    def _advantages(self, data: Batch, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lam_policy: float | torch.Tensor
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
        forward: CriticForward | None = None,
        pieces: list[Piece] | None = None,
        replays: list[torch.Tensor | None] | None = None,
    ) -> Step:
        """One critic step, 0.5 x token_mean[(V - G)^2] (optionally clipped), through the policy's
        machinery (trainers/policy_step.py). `forward`: the critic's forward on this batch at its
        current parameters, if the caller already has it. `pieces`: the batch's micro-batches;
        `replays`: the expert ids each one's forward replays (routing replay)."""

        def loss_of(k: int, piece: Piece) -> tuple[torch.Tensor, dict[str, Any], tuple | None]:
            mb = piece.batch
            forced = replays[k] if replays else None
            values, router = self._critic_forward(mb, forced) if forward is None else forward
            old = piece.cut(old_values) if self.cfg.value_clip else None
            mask = critic_mask(mb.action_mask, self.cfg.gae)
            return value_loss(values, piece.cut(returns), mask, old, self.cfg.value_clip), {}, router

        critic = Stepped("critic", self.critic, self.critic_opt, self.critic.backbone.config, self._critic_routing)
        whole = [Piece(data, 0, data.tokens.shape[0], data.tokens.shape[1])]  # value pretraining's batches
        return guarded_update(critic, pieces or whole, loss_of, self.cfg, self.module_patterns)

    def _critic_forward(self, mb: Batch, forced: torch.Tensor | None = None) -> CriticForward:
        return self.critic(mb.tokens, mb.attention_mask, output_router_logits=True, forced=forced)

    def _critic_routing(self, mb: Batch) -> tuple | None:
        return self._critic_forward(mb)[1]

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
        return {**super().state_dict(), **self.warmup_state(), "updates": self.updates, "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.load_warmup_state(state)
        self.updates = state["updates"]  # an older checkpoint's "dropped_stale" is unused
        self.rng.setstate(state["rng"])
