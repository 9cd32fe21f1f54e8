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
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from testbed.device import of as device_of
from testbed.types import Trajectory
from trainers.baselines import broadcast_to_tokens, group_advantages
from trainers.batching import collate
from trainers.config import Corrections, TrainerConfig
from trainers.losses import PolicyLoss
from trainers.policy_step import PolicyTrainer, adamw
from trainers.renamed import Hint

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


class GRPOConfig(Corrections, TrainerConfig):
    renamed: ClassVar[Mapping[str, Hint]] = {
        "prompts_per_update": lambda prompts, given: episodes_hint(
            prompts, given.get("group_size", GRPOConfig.model_fields["group_size"].default)
        )
    }

    group_size: int = Field(8, ge=1, description="G rollouts per prompt, each judged (and counted)")
    lr: float = Field(2e-4, gt=0)
    advantage: Literal["grpo", "rloo"] = "grpo"
    policy_loss: Literal["ppo_clip", "dis", "tis", "mis", "seq_mask"] = Field(
        "ppo_clip",
        description="'dis': SAO's DIS (tokens whose ratio to the engine's log-probs leaves the band get weight 0); "
        "'tis', 'mis', 'seq_mask': trainers/losses.py",
    )
    epochs: int = Field(1, ge=1, description="PPO epochs over each batch")

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

    def loss_settings(self) -> PolicyLoss:
        """PPO clip (the default), DIS, TIS, MIS or the sequence mask, against the log-probs the engine recorded."""
        return self._loss(self.policy_loss, self.band_of(self.policy_loss))


class GRPOTrainer(PolicyTrainer):
    Config = GRPOConfig
    cfg: GRPOConfig

    def __init__(self, policy: torch.nn.Module, config: dict[str, Any] | None = None, /, **kwargs: Any):
        super().__init__(policy, config, **kwargs)
        self.group_size = self.cfg.group_size
        self.policy_opt = adamw(policy.parameters(), self.cfg.lr, self.cfg.adam_eps)
        if self.group_size == 1:
            warnings.warn(G1_WARNING, stacklevel=2)

    def update(self, batch: list[Trajectory]) -> dict[str, Any]:
        data = collate(batch, self.pad_id, device=device_of(self.policy))

        # Group-relative advantages over whole groups; micro-batches only slice rows of them.
        per_episode = group_advantages(data.episode_rewards, [t.group_id for t in batch], kind=self.cfg.advantage)
        advantages = broadcast_to_tokens(per_episode, data.action_mask)

        # PPO epochs over the same micro-batches, against the same reference log-probs.
        pieces = self.pieces(data)
        refs = self.reference_logprobs(pieces)
        replays = self.replays(pieces)  # r2: the routing before the first epoch, held through them all
        metrics: dict[str, float] = {}
        stepped, skipped = False, []
        for _ in range(self.cfg.epochs):
            metrics, nonfinite = self.policy_step(pieces, advantages, refs, replays)
            if nonfinite is not None:
                skipped.append(nonfinite)  # same batch, same parameters: the remaining epochs would fail alike
                break
            stepped = True
        if stepped:  # the version moves with the parameters, even if a later epoch was skipped
            self.version += 1

        groups = {t.group_id for t in batch}
        zero = (per_episode == 0).tolist()  # one copy from the device, not one per episode
        return {
            **metrics,
            **self.outcome(data, skipped),
            "advantage_abs_mean": float(per_episode.abs().mean()),
            "zero_advantage_groups": float(
                sum(1 for g in groups if all(zero[i] for i, t in enumerate(batch) if t.group_id == g)) / len(groups)
            ),
        }
