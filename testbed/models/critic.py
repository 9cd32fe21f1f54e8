"""The SAO critic: the policy's architecture plus a per-token value head, initialised from the
SFT policy. With `trainable="moe"` its attention is frozen and only the MoE layers (router and
experts) and the value head learn (docs/algorithms.md, design 2)."""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn

from testbed.models.policy import hidden_states

ATTENTION, EXPERTS, ROUTER, OTHER = "attention", "experts", "router", "other"


def module_family(name: str) -> str:
    """Which part of a Qwen3-MoE block a parameter belongs to (for freezing and grad norms)."""
    if ".self_attn." in name:
        return ATTENTION
    if ".mlp.experts." in name or ".mlp.shared_expert" in name:
        return EXPERTS
    if ".mlp.gate." in name:
        return ROUTER
    return OTHER


class Critic(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        # Start at V = 0 everywhere, so an un-pretrained critic makes advantages = returns.
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_policy(
        cls, policy: nn.Module, trainable: Literal["moe", "all"] = "moe", train_embeddings_norms: bool = False
    ) -> Critic:
        critic = cls(copy.deepcopy(policy.model), policy.config.hidden_size)
        critic.set_trainable(trainable, train_embeddings_norms)
        return critic

    def set_trainable(self, trainable: Literal["moe", "all"], train_embeddings_norms: bool = False) -> None:
        for name, param in self.backbone.named_parameters():
            family = module_family("." + name)
            if trainable == "all":
                param.requires_grad = True
            elif family == ATTENTION:
                param.requires_grad = False
            elif family in (EXPERTS, ROUTER):
                param.requires_grad = True
            else:  # embeddings and norms
                param.requires_grad = train_embeddings_norms
        for param in self.value_head.parameters():
            param.requires_grad = True

    def forward(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor, output_router_logits: bool = False
    ) -> tuple[torch.Tensor, tuple | None]:
        """Values [B, T] aligned with tokens like `token_logprobs`: values[:, t] is V of the state
        in which token t is chosen (read from the hidden state at t-1); position 0 gets 0."""
        hidden, router = hidden_states(self.backbone, tokens, attention_mask, output_router_logits)
        values = self.value_head(hidden[:, :-1]).squeeze(-1).float()
        values = torch.cat([torch.zeros_like(values[:, :1]), values], dim=1)
        return values, router


def trainable_parameter_counts(model: nn.Module) -> dict[str, int]:
    counts = {"total": 0, "trainable": 0}
    for name, param in model.named_parameters():
        counts["total"] += param.numel()
        if param.requires_grad:
            counts["trainable"] += param.numel()
            family = module_family("." + name)
            counts[f"trainable_{family}"] = counts.get(f"trainable_{family}", 0) + param.numel()
    return counts
