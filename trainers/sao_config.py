"""SAO's settings: every ablation of the paper's Table 4 is a switch here (docs/algorithms.md);
the trainer itself is `trainers.sao`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from testbed.models.critic import ModulePatterns
from trainers.config import Corrections, TrainerConfig
from trainers.losses import PolicyLoss
from trainers.renamed import Hint, moved_to_runtime, renamed_to


class SAOConfig(Corrections, TrainerConfig):
    renamed: ClassVar[Mapping[str, Hint]] = {
        "batch_size": renamed_to("episodes_per_update"),
        "staleness_bound": moved_to_runtime,
    }

    policy_lr: float = Field(2e-4, gt=0)
    critic_lr: float = Field(1e-3, gt=0, description="TTUR: larger than the policy's (paper: 5x)")
    value_updates_per_policy_update: int = Field(2, ge=1, description="K; the 'w/o faster value' ablation is 1")
    critic_trainable: Literal["moe", "all", "lora"] = Field(
        "moe",
        description="'moe' freezes the critic's attention; 'lora' also freezes its experts' base weights and trains "
        "LoRA adapters on them",
    )
    critic_lora_r: int = Field(8, ge=1, description="the critic's adapters' rank (critic_trainable: lora)")
    critic_lora_alpha: int = Field(16, ge=1, description="the critic's adapters' scale alpha / r (lora)")
    critic_train_embeddings_norms: bool = False
    critic_module_patterns: ModulePatterns | None = Field(
        None,
        description=(
            "regexes naming the checkpoint's attention / router / experts parameters, for a family whose names "
            "the defaults (testbed/models/modules.py) do not cover"
        ),
    )
    gae: Literal["token", "step_average", "step_last", "naive"] = Field(
        "token", description=("'token' skips observations; 'naive' runs GAE across them (values at observation tokens)")
    )
    gamma: float = Field(1.0, ge=0, le=1)
    lambda_policy: float | Literal["adaptive"] = Field("adaptive", description="'adaptive': 1 - 1/(alpha * l)")
    alpha: float = Field(1.5, gt=0)
    lambda_critic: float = Field(1.0, ge=0, le=1)
    policy_loss: Literal["dis", "ppo_clip", "tis", "mis", "seq_mask"] = Field(
        "dis",
        description="the correction (trainers/losses.py): 'ppo_clip' is vanilla VAPO (no DIS); 'tis', 'mis' (IcePop) "
        "and 'seq_mask' (geometric-mean sequence mask) take the bands of trainers/config.py's Corrections",
    )
    value_clip: float | None = Field(None, gt=0, description="PPO-style value clipping (off by default)")
    advantages_from: Literal["fitted", "pre_update"] = Field(
        "fitted",
        description=(
            "'fitted': advantages from the critic after its K steps on this batch (the paper's order: the critic "
            "catches up first); 'pre_update': from the critic as it was before it saw the batch, so the baseline "
            "cannot have been pulled toward the returns it is subtracted from"
        ),
    )
    value_pretrain_samples: int = Field(2048, ge=0, description="judged SFT samples for value pretraining (0: none)")
    value_pretrain_epochs: int = Field(6, ge=1)
    value_pretrain_batch: int = Field(64, ge=1)
    value_warmup_updates: int = Field(10, ge=0, description="critic-only updates at the start of RL (policy frozen)")

    def loss_settings(self) -> PolicyLoss:
        """DIS (the default), PPO clip (vanilla VAPO), TIS, MIS or the sequence mask, all against the
        engine's own log-probs."""
        return self._loss(self.policy_loss, self.band_of(self.policy_loss))
