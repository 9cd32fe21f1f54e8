"""Which part of an MoE checkpoint a parameter belongs to: attention, experts, router, the critic's
value head, or other (embeddings, norms, the output layer), by module-name patterns.

The critic freezes its attention by these patterns and the trainers report gradient norms per
part, so the same code serves any family. The default patterns follow the names transformers
uses across its MoE families (checked on qwen3_moe, qwen2_moe, qwen3_next, mixtral, minimax,
olmoe, deepseek_v2/v3, glm4_moe, solar_open, gpt_oss, phimoe, granitemoe, hunyuan_v1_moe); a
checkpoint named otherwise takes an override (SAO's `critic_module_patterns`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# A transformers model or one of its submodules: torch types their config and children as
# `Tensor | Module` attributes, so they are walked untyped.
HFModule = Any

ATTENTION, EXPERTS, ROUTER, HEAD, OTHER = "attention", "experts", "router", "head", "other"
FAMILIES = (ATTENTION, EXPERTS, ROUTER, HEAD, OTHER)


class ModulePatterns(BaseModel):
    """Regular expressions searched in a parameter's dotted name (with a leading "."), per part.
    The first part whose pattern matches wins, in the order attention, router, experts, head."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attention: tuple[str, ...] = Field(min_length=1, description="the token mixer (self-attention, linear attention)")
    router: tuple[str, ...] = Field(min_length=1, description="the expert gates")
    experts: tuple[str, ...] = Field(min_length=1, description="routed and shared experts")
    head: tuple[str, ...] = (r"^\.value_head\.",)

    @field_validator("attention", "router", "experts", "head")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None
        return patterns

    def family(self, name: str) -> str:
        return _classify(self, name if name.startswith(".") else "." + name)


# Routers before experts: Qwen2-MoE's `shared_expert_gate` gates the shared expert.
DEFAULT_PATTERNS = ModulePatterns(
    attention=(r"\.self_attn\.", r"\.linear_attn\."),
    router=(r"\.(mlp|block_sparse_moe)\.(gate|router|shared_expert_gate)\.",),
    experts=(r"\.(mlp|block_sparse_moe)\.(experts|shared_experts?|shared_mlp)\.",),
)


@functools.lru_cache(maxsize=65536)
def _classify(patterns: ModulePatterns, name: str) -> str:
    for family in (ATTENTION, ROUTER, EXPERTS, HEAD):
        if any(re.search(p, name) for p in getattr(patterns, family)):
            return family
    return OTHER


def module_family(name: str, patterns: ModulePatterns | None = None) -> str:
    """The part a parameter named `name` belongs to (default patterns unless given)."""
    return (patterns or DEFAULT_PATTERNS).family(name)


def parameter_split(model, patterns: ModulePatterns | None = None) -> dict[str, int]:
    """Parameters per part, in total and trainable: `total`, `trainable`, `total_<part>` and
    `trainable_<part>` (a part with no trainable parameter has no `trainable_<part>` key)."""
    counts = {"total": 0, "trainable": 0}
    for name, param in model.named_parameters():
        family = module_family(name, patterns)
        counts["total"] += param.numel()
        counts[f"total_{family}"] = counts.get(f"total_{family}", 0) + param.numel()
        if param.requires_grad:
            counts["trainable"] += param.numel()
            counts[f"trainable_{family}"] = counts.get(f"trainable_{family}", 0) + param.numel()
    return counts


def describe_split(counts: dict[str, int]) -> str:
    """One line for the run's log: trainable / total parameters per part."""
    parts = [
        f"{f} {counts.get(f'trainable_{f}', 0):,}/{counts[f'total_{f}']:,}" for f in FAMILIES if f"total_{f}" in counts
    ]
    return f"trainable parameters {counts['trainable']:,} of {counts['total']:,} ({', '.join(parts)})"


def missing_parts(model, patterns: ModulePatterns, parts: tuple[str, ...] = (ATTENTION, ROUTER, EXPERTS)) -> list[str]:
    """The parts no parameter of `model` matches (a sign the patterns do not fit its family)."""
    found = {module_family(name, patterns) for name, _ in model.named_parameters()}
    return [p for p in parts if p not in found]


# transformers' families name the routed-expert count differently (Qwen: num_experts, Mixtral and
# most others: num_local_experts, DeepSeek and GLM-MoE: n_routed_experts).
EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")


def moe_shape(config) -> tuple[int, int] | None:
    """(routed experts, experts per token) of a transformers config, or None for a dense model."""
    experts = next((getattr(config, f) for f in EXPERT_COUNT_FIELDS if getattr(config, f, None)), None)
    top_k = getattr(config, "num_experts_per_tok", None)
    return (int(experts), int(top_k)) if experts and top_k else None
