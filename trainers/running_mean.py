"""The running-mean baseline (docs/algorithms.md): REINFORCE on single rollouts with a sliding window of the
most recent rewards as the baseline,

    A = r - mean(r over the last `window` rewards, this one included),

broadcast to every action token. The loss is DIS against the engine's log-probs by default, or
plain REINFORCE; the step is every trainer's (trainers/policy_step.py).

`baseline: oracle` is the upper bound a state-dependent baseline could reach: A = r - b(prompt),
where b is the mean reward of `baseline_samples` more samples of the same prompt from the same
policy, judged at the episode's target and never trained on (the runtime draws them, and counts
their judge calls apart: `baseline_judge_calls`). A perfect critic's first-token value is b; the
arm shows how much such a baseline could gain over the window, so that a null between SAO and the
running mean can be read. Its judge calls are k + 1 per trained episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from testbed.device import of as device_of
from testbed.types import Trajectory
from trainers.baselines import SlidingWindowBaseline, broadcast_to_tokens
from trainers.batching import collate
from trainers.config import DISBand, TrainerConfig
from trainers.data_parallel import full_batch
from trainers.losses import PolicyLoss
from trainers.policy_step import PolicyTrainer, adamw
from trainers.renamed import Hint, renamed_to


class RunningMeanConfig(DISBand, TrainerConfig):
    renamed: ClassVar[Mapping[str, Hint]] = {"batch_size": renamed_to("episodes_per_update")}

    window: int = Field(128, ge=1, description="rewards in the sliding-window baseline")
    per_prompt: bool = Field(False, description="one window per prompt (Table 4 variant) instead of global")
    lr: float = Field(2e-3, gt=0)
    loss: Literal["dis", "reinforce"] = "dis"
    baseline: Literal["window", "oracle"] = Field("window", description="oracle: the upper-bound baseline")
    baseline_samples: int = Field(0, ge=0, description="with baseline: oracle, samples per prompt (>= 2)")

    @model_validator(mode="after")
    def _oracle(self) -> RunningMeanConfig:
        if self.baseline == "oracle" and self.baseline_samples < 2:
            raise ValueError("baseline: oracle needs baseline_samples >= 2 (the samples its mean is taken over)")
        if self.baseline == "window" and self.baseline_samples:
            raise ValueError("baseline_samples goes with baseline: oracle")
        return self

    def loss_settings(self) -> PolicyLoss:
        if self.loss == "reinforce":
            return self._loss("none")
        return self._loss("dis", self.dis_band)


def explained_share(rewards: torch.Tensor, advantages: torch.Tensor) -> float:
    """1 - Var(A) / Var(r): the share of the rewards' variance the baselines b = r - A explain
    (NaN when the rewards do not vary; negative when the baselines add variance)."""
    var = float(rewards.var(unbiased=False))
    return float("nan") if var == 0 else 1.0 - float(advantages.var(unbiased=False)) / var


class RunningMeanTrainer(PolicyTrainer):
    Config = RunningMeanConfig
    cfg: RunningMeanConfig

    def __init__(self, policy: torch.nn.Module, config: dict[str, Any] | None = None, /, **kwargs: Any):
        super().__init__(policy, config, **kwargs)
        self.policy_opt = adamw(policy.parameters(), self.cfg.lr, self.cfg.adam_eps)
        self.baseline = SlidingWindowBaseline(size=self.cfg.window, per_prompt=self.cfg.per_prompt)
        self.baseline_samples = self.cfg.baseline_samples  # the runtime draws them (testbed/runtimes/runner.py)

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))

        # A = r - the window's mean. The window runs over the whole batch in order, also when this
        # is one data-parallel shard of it.
        window_before = self.baseline.state_dict()
        prompts = [t.prompt_id for t in batch] if self.cfg.per_prompt else None
        window = full_batch(self.baseline.advantages, [t.reward for t in batch], prompts)
        if self.cfg.baseline == "oracle":  # the prompt's own expected reward; the window where none was judged
            window = [a if t.baseline_reward is None else t.reward - t.baseline_reward for a, t in zip(window, batch)]
        per_episode = torch.tensor(window, dtype=torch.float)
        advantages = broadcast_to_tokens(per_episode.to(data.tokens.device), data.action_mask)

        metrics, nonfinite = self.policy_step(self.pieces(data), advantages)
        if nonfinite is None:
            self.version += 1
        else:
            # The batch is dropped whole: a nan reward left in the window would poison the
            # advantages of the next `window` rewards.
            self.baseline.load_state_dict(window_before)
        return {
            **metrics,
            **self.outcome(data, [] if nonfinite is None else [nonfinite]),
            "baseline": float(data.episode_rewards.mean().cpu() - per_episode.mean()),
            "advantage_abs_mean": float(per_episode.abs().mean()),
            # how much of the batch's reward variance its per-episode baselines explain (r - A = b)
            "baseline_ev": explained_share(data.episode_rewards.cpu().float(), per_episode),
        }

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "baseline": self.baseline.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.baseline.load_state_dict(state["baseline"])
