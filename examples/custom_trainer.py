"""A custom trainer, plugged in by import path: REINFORCE with an exponentially weighted baseline.

    A = r - b,   then   b <- b + beta * (r - b)      (per episode, in batch order)

Scenario snippet (with this directory, or your own package, on PYTHONPATH)::

    arms:
      - name: ema
        type: "custom_trainer:EMABaselineTrainer"   # for your package: "mypkg.algo:MyTrainer"
        args: {episodes_per_update: 32, lr: 2.0e-4, beta: 0.05}

The contract (docs/plugins.md has it in full):
  * `Config`: a pydantic model that validates the arm's `args` when the scenario loads (unknown
    and badly typed keys are named); its optional `episodes_per_update` lets the budget check run
    before the trainer is built;
  * built as `cls(policy, *, pad_id, temperature, seed, **args)`; `policy` is the transformers
    causal LM that the engine samples from (in the synchronous runtime the same object);
  * `episodes_per_update` (judged episodes one update consumes), `group_size` (samples per
    prompt; 1 for single rollouts), `version` (policy updates so far);
  * `update(batch) -> dict` of float metrics, always with "nonfinite" (the first non-finite
    quantity, or None) and "skipped_steps" (optimiser steps skipped for it, an int);
  * `state_dict()` / `load_state_dict()`: everything a resumed run needs to continue exactly.

It reuses the project's pieces (`trainers.batching`, `trainers.losses`, `trainers.numerics`); a
trainer may equally compute everything itself.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from testbed.models.policy import token_logprobs
from testbed.types import Trajectory
from trainers.baselines import broadcast_to_tokens
from trainers.batching import collate
from trainers.losses import PolicyLoss, policy_gradient_loss
from trainers.numerics import guarded_step

REINFORCE = PolicyLoss("none")  # the policy loss with no correction for the engine's log-probs


class EMABaselineTrainer:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")

        episodes_per_update: int = Field(
            32, ge=1, description="single rollouts per policy update (each a judged episode)"
        )
        lr: float = Field(2e-4, gt=0, allow_inf_nan=False)
        beta: float = Field(0.05, gt=0, le=1, description="weight of the newest reward in the baseline")
        max_grad_norm: float = Field(1.0, gt=0, allow_inf_nan=False)

    group_size = 1  # one rollout per prompt: the baseline, not a group, centres the reward

    def __init__(
        self, policy: torch.nn.Module, *, pad_id: int, temperature: float = 1.0, seed: int = 0, **args: Any
    ) -> None:
        self.cfg = self.Config.model_validate(args)  # the arm's args arrive as keywords
        self.policy, self.pad_id, self.temperature = policy, pad_id, temperature
        self.episodes_per_update = self.cfg.episodes_per_update  # the loop reads it
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=self.cfg.lr, weight_decay=0.0)
        self.baseline = 0.0
        self.version = 0

    def _advantages(self, rewards: list[float]) -> list[float]:
        out = []
        for r in rewards:
            out.append(r - self.baseline)
            self.baseline += self.cfg.beta * (r - self.baseline)
        return out

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=next(self.policy.parameters()).device)  # runtime.device
        baseline_before = self.baseline
        per_episode = self._advantages([t.reward for t in batch])
        advantages = broadcast_to_tokens(torch.tensor(per_episode), data.action_mask)
        self.policy.train()
        logprobs, _ = token_logprobs(self.policy, data.tokens, data.attention_mask, self.temperature)
        loss, stats = policy_gradient_loss(logprobs, data.behaviour_logprobs, advantages, data.action_mask, REINFORCE)
        grad_norm, nonfinite = guarded_step(
            loss, self.policy.parameters(), self.optimizer, self.cfg.max_grad_norm, "policy"
        )
        if nonfinite is None:
            self.version += 1
        else:
            self.baseline = baseline_before  # the skipped batch leaves no trace, not even in the baseline
        return {
            "nonfinite": nonfinite,
            "skipped_steps": int(nonfinite is not None),
            "policy_loss": float(loss.detach()),
            "policy_grad_norm": float(grad_norm),
            **stats,  # ratio_mean and approx_kl: how far the policy moved from the engine's
            "baseline": baseline_before,
            "reward_mean": float(data.episode_rewards.mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": self.baseline,
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline, self.version = float(state["baseline"]), int(state["version"])
