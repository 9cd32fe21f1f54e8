"""The scenario's world and policy sections: which styles the world offers and what a baseline may
know (`world`), the policy's shape and its SFT (`policy`, `policy.sft`), and how it samples
(`sampling`). testbed/scenario/schema.py puts them together with the rest of a scenario."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from testbed.paths import check_directory
from testbed.scenario.loading import clip
from testbed.scenario.lora import LoraSettings
from testbed.scenario.plugins import Strict
from testbed.world import STYLES
from testbed.world.rules import HardTopics, NoisyTopics, WorldRules

__all__ = ["PolicyConfig", "SFTConfig", "SamplingConfig", "Seed", "WorldConfig"]

# np.random.seed (the loop seeds numpy per arm x seed) takes only this range; outside it a run crashes
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


class WorldConfig(Strict):
    styles: list[str] = Field(default_factory=lambda: list(STYLES), min_length=1)
    archetypes: list[str] = Field(
        default_factory=lambda: ["academic", "cute", "chuunibyou", "classical"],
        min_length=1,
        description="the styles a prompt may offer as candidates by default",
    )
    # What a baseline can know (testbed/world/rules.py; all off by default)
    hard_topics: HardTopics = Field(default_factory=HardTopics)
    noisy_topics: NoisyTopics = Field(default_factory=NoisyTopics)
    candidate_change_share: float = Field(
        default=1.0, ge=0, le=1, description="share of prompt forms whose candidate list follows the schedule"
    )

    def rules(self) -> WorldRules:
        return WorldRules(hard_topics=self.hard_topics, noisy_topics=self.noisy_topics)

    @field_validator("styles", "archetypes")
    @classmethod
    def _known_styles(cls, styles: list[str]) -> list[str]:
        for i, s in enumerate(styles):
            if s not in STYLES:
                raise ValueError(f"unknown style '{clip(s, 80)}' (the world has: {', '.join(STYLES)})")
            if s in styles[:i]:
                raise ValueError(f"'{s}' is listed twice")
        return styles


class SFTConfig(Strict):
    steps: int = Field(default=400, ge=0)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=1e-2, gt=0)
    corpus_size: int = Field(default=20_000, ge=1)
    # Acceptance: keep training (in rounds of `steps`) until every archetype is written and
    # quality is high, as judged by the embedded rubric on held-out prompts.
    min_style_share: float = Field(default=0.10, ge=0, le=1)
    min_quality: float = Field(default=0.80, ge=0, le=1)
    eval_samples: int = Field(default=256, ge=1)
    max_rounds: int = Field(default=3, ge=1)
    seed: Seed = 0
    per_seed: bool = Field(
        default=False,
        description="each run seed its own SFT policy (SFT seed = seed + the run's seed), "
        "so intervals cover the starting policy",
    )


class PolicyConfig(Strict):
    checkpoint: str | None = Field(default=None, description="a real HF checkpoint directory replaces the built model")
    hidden_size: int = Field(default=64, ge=8)
    num_layers: int = Field(default=4, ge=1)
    num_heads: int = Field(default=4, ge=1)
    num_kv_heads: int = Field(default=2, ge=1)
    num_experts: int = Field(default=8, ge=1)
    top_k: int = Field(default=2, ge=1)
    expert_size: int = Field(default=64, ge=1, description="moe_intermediate_size")
    max_positions: int = Field(default=128, ge=16)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    lora: LoraSettings | None = Field(
        default=None, description="train LoRA adapters (PEFT) on the frozen policy instead of all of it"
    )

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_directory(cls, path: str | None) -> str | None:
        """A missing directory or one with no config.json is named now, not after start-up."""
        if path is not None:
            try:
                check_directory(path)
            except FileNotFoundError as exc:
                raise ValueError(str(exc).removeprefix("policy.checkpoint: ")) from None
        return path

    @model_validator(mode="after")
    def _shapes(self) -> PolicyConfig:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) cannot exceed num_experts ({self.num_experts})")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads ({self.num_kv_heads})")
        return self


class SamplingConfig(Strict):
    temperature: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=48, ge=1)
    # Where each sampled token's uniform comes from. "batch": one CPU generator for the whole run,
    # one draw per row of a batch per step (the arms of a seed fall out of step after the first
    # responses). "episode": a counter-based stream per episode (Philox, keyed by the seed and the
    # episode's clock, turn and token position; testbed/engines/streams.py), so the arms of a seed
    # draw the same uniforms for the same episode whatever the batch layout: common random numbers.
    # The default stays "batch" so that older scenarios keep their rows; the headline (style_shift),
    # style_cycle and mechanism scenarios set "episode".
    streams: Literal["batch", "episode"] = "batch"
