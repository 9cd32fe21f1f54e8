"""SAO's value pretraining (design 4, docs/algorithms.md): the critic regressed on lambda=1
returns of judged samples from the fixed SFT policy, before RL starts; and the settings that
determine the pretrained critic, under which the loop caches it. `SAOTrainer.warmup` and
`SAOTrainer.warmup_key` (the trainer protocol's warm-up hooks) call these."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from testbed.device import of as device_of
from testbed.types import Trajectory
from trainers.advantages import critic_mask, policy_and_critic_advantages
from trainers.batching import Batch, collate
from trainers.losses import explained_variance
from trainers.sao_config import SAOConfig

# (batch, returns, old values) -> (metrics, the non-finite quantity if the step was skipped)
CriticStep = Callable[[Batch, torch.Tensor, torch.Tensor], tuple[dict[str, float], str | None]]


def pretrain_values(
    trajectories: list[Trajectory],
    cfg: SAOConfig,
    critic: torch.nn.Module,
    critic_step: CriticStep,
    rng: random.Random,
    pad_id: int,
    on_step: Callable[..., None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Regress the critic on lambda=1 returns of `trajectories`, epoch by epoch (shuffled by `rng`),
    one `critic_step` per batch: (the loss and explained variance after each epoch, the critic
    steps skipped for a non-finite loss or gradient). After each critic step, `on_step(step, total,
    epoch=..., value_loss=...)`: the epoch's mean loss so far (at its last step, the curve's point)."""
    curve = []
    skipped = 0
    size = cfg.value_pretrain_batch
    batches = -(-len(trajectories) // size)  # per epoch
    for epoch in range(cfg.value_pretrain_epochs):
        order = list(range(len(trajectories)))
        rng.shuffle(order)
        losses, evs = [], []
        for i in range(0, len(order), size):
            data = collate([trajectories[j] for j in order[i : i + size]], pad_id, device=device_of(critic))
            with torch.no_grad():
                before, _ = critic(data.tokens, data.attention_mask)
            _, returns = policy_and_critic_advantages(
                data.rewards, before, data.action_mask, cfg.gamma, 1.0, 1.0, cfg.gae
            )
            evs.append(explained_variance(before, returns, critic_mask(data.action_mask, cfg.gae)))
            step_metrics, nonfinite = critic_step(data, returns, before)
            losses.append(step_metrics["critic_loss"])
            skipped += nonfinite is not None
            if on_step is not None:  # the losses are host floats already
                on_step(
                    epoch * batches + i // size + 1,
                    cfg.value_pretrain_epochs * batches,
                    epoch=epoch + 1,
                    value_loss=sum(losses) / len(losses),
                )
        curve.append(
            {
                "epoch": epoch + 1,
                "value_loss": sum(losses) / len(losses),
                "explained_variance": float(torch.tensor(evs).nanmean()),
            }
        )
    return curve, skipped


def pretrained_critic_key(cfg: SAOConfig) -> dict[str, Any]:
    """The settings that determine the pretrained critic (the loop caches it under these)."""
    key = cfg.model_dump(
        include={
            "critic_trainable",
            "critic_train_embeddings_norms",
            "gae",
            "gamma",
            "critic_lr",
            "value_clip",
            "value_pretrain_samples",
            "value_pretrain_epochs",
            "value_pretrain_batch",
            "max_grad_norm",
        }
    )
    if cfg.router_aux_loss_coef > 0:  # only when on, so that existing caches keep their keys
        key["router_aux_loss_coef"] = cfg.router_aux_loss_coef
    if cfg.critic_trainable == "lora":  # likewise
        key.update(cfg.model_dump(include={"critic_lora_r", "critic_lora_alpha"}))
    if cfg.critic_module_patterns is not None:  # likewise
        key["critic_module_patterns"] = cfg.critic_module_patterns.model_dump(mode="json")
    return key
