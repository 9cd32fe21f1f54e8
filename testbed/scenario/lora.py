"""LoRA settings (`policy.lora`): low-rank adapters trained through PEFT while the base weights stay
frozen (testbed/models/lora.py applies them; docs/distributed.md#lora says when to pick them)."""

from __future__ import annotations

from pydantic import Field, field_validator

from testbed.scenario.plugins import Strict

# Attention's projections and the fused MoE experts' two weights (transformers 5 keeps a layer's
# experts as 3-D parameters `experts.gate_up_proj` / `experts.down_proj`, not as Linear modules).
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj")


class LoraSettings(Strict):
    """The policy's adapters: W + (alpha / r) x B A on every target, A and B trained, W frozen."""

    r: int = Field(8, ge=1, description="the adapters' rank (per expert for a fused expert weight)")
    alpha: int = Field(16, ge=1, description="scale: the update is alpha / r x B A (an integer, as PEFT takes it)")
    dropout: float = Field(
        0.0, ge=0, lt=1, description="dropout on the adapters' input; Linear targets only (PEFT cannot on experts)"
    )
    target_modules: tuple[str, ...] = Field(
        DEFAULT_TARGETS,
        min_length=1,
        description=(
            "names (a dotted suffix) of Linear modules, or of parameters such as a fused expert weight "
            "(experts.gate_up_proj), that get adapters"
        ),
    )

    @field_validator("target_modules")
    @classmethod
    def _names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name or name.startswith(".") or name.endswith(".") or " " in name:
                raise ValueError(f"{name!r} is not a module or parameter name (a dotted suffix like 'q_proj')")
        return names
