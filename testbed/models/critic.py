"""The SAO critic: the policy's backbone plus a per-token value head, initialised from the
starting policy (the project's Qwen3-MoE or any Hub checkpoint). With `trainable="moe"` its
attention is frozen and only the MoE layers (router and experts) and the value head learn
(docs/algorithms.md, design 2); with `trainable="lora"` the experts get LoRA adapters instead
(`testbed.models.lora`) and their base weights freeze too. The parts are found by module-name
patterns (`testbed.models.modules`)."""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn

from testbed.models.lora import attach_to_experts, has_adapters, merged_copy
from testbed.models.modules import (  # noqa: F401  (re-exported: the trainers and tests import them from here)
    ATTENTION,
    DEFAULT_PATTERNS,
    EXPERTS,
    HEAD,
    OTHER,
    ROUTER,
    HFModule,
    ModulePatterns,
    missing_parts,
    module_family,
    parameter_split,
)
from testbed.models.policy import hidden_states

Trainable = Literal["moe", "all", "lora"]


class Critic(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int, patterns: ModulePatterns | None = None):
        super().__init__()
        self.backbone = backbone
        # Beside the backbone (runtime.device); made on the CPU first, so the CPU random stream is
        # the same on any device.
        self.value_head = nn.Linear(hidden_size, 1).to(next(backbone.parameters()).device)
        self.patterns = patterns  # None: the defaults (testbed.models.modules.DEFAULT_PATTERNS)
        # Start at V = 0 everywhere, so an un-pretrained critic makes advantages = returns.
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_policy(
        cls,
        policy: HFModule,
        trainable: Trainable = "moe",
        train_embeddings_norms: bool = False,
        patterns: ModulePatterns | None = None,
        lora_r: int = 8,
        lora_alpha: int = 16,
        seed: int = 0,
    ) -> Critic:
        """A copy of the policy's backbone (`get_decoder()`: `model` in transformers' causal LMs);
        of a LoRA policy, its base with the adapters merged (a plain model: the critic's own
        adapters, if any, go on the experts alone)."""
        merged: HFModule = merged_copy(policy) if has_adapters(policy) else None
        backbone = merged.get_decoder() if merged is not None else copy.deepcopy(policy.get_decoder())
        critic = cls(backbone, policy.config.hidden_size, patterns)
        if trainable == "lora":
            attach_to_experts(critic.backbone, lora_r, lora_alpha, patterns, seed)
        critic.set_trainable(trainable, train_embeddings_norms)
        return critic

    def set_trainable(self, trainable: Trainable, train_embeddings_norms: bool = False) -> None:
        if trainable in ("moe", "lora"):
            missing = missing_parts(self.backbone, self.patterns or DEFAULT_PATTERNS)
            if missing:
                family = getattr(self.backbone.config, "model_type", "?")
                sample = [n for n, _ in self.backbone.named_parameters()][:6]
                raise ValueError(
                    f"critic_trainable '{trainable}': no parameter of this {family} checkpoint matches the "
                    f"{' / '.join(missing)} patterns (names look like {sample}); give SAO's "
                    "critic_module_patterns for it, or use critic_trainable: all"
                )
        for name, param in self.backbone.named_parameters():
            family = module_family("." + name, self.patterns)
            if trainable == "all":
                param.requires_grad = True
            elif trainable == "lora" and family == EXPERTS:  # the adapters learn, the experts' base weights stay
                param.requires_grad = ".lora_" in name
            elif family == ATTENTION:
                param.requires_grad = False
            elif family in (EXPERTS, ROUTER):
                param.requires_grad = True
            else:  # embeddings and norms
                param.requires_grad = train_embeddings_norms
        for param in self.value_head.parameters():
            param.requires_grad = True

    def forward(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        output_router_logits: bool = False,
        forced: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple | None]:
        """Values [B, T] aligned with tokens like `token_logprobs`: values[:, t] is V of the state
        in which token t is chosen (read from the hidden state at t-1); position 0 gets 0.
        `forced` [B, T, L, k]: expert ids to replay (routing replay, testbed/models/routing.py)."""
        hidden, router = hidden_states(self.backbone, tokens, attention_mask, output_router_logits, forced)
        values = self.value_head(hidden[:, :-1]).squeeze(-1).float()
        values = torch.cat([torch.zeros_like(values[:, :1]), values], dim=1)
        return values, router


def trainable_parameter_counts(model: HFModule, patterns: ModulePatterns | None = None) -> dict[str, int]:
    """The split of a model's parameters (attention, experts, router, head, other), trainable and in total."""
    return parameter_split(model, patterns)
