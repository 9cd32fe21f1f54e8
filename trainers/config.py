"""The settings every built-in trainer shares, declared once (`TrainerConfig`), and the bands a
policy loss's correction may take (`DISBand`, `PPOClip`, `Corrections`: TIS, MIS, the sequence
mask). Each trainer's Config adds its own fields and says which policy loss it takes
(`loss_settings`, trainers/losses.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainers.losses import Aggregation, Correction, PolicyLoss
from trainers.renamed import Hint, refuse_renamed


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # an inf lr would NaN the policy

    # old spellings, refused with the new one (trainers/renamed.py)
    renamed: ClassVar[Mapping[str, Hint]] = {}

    episodes_per_update: int = Field(
        32, ge=1, description="judged episodes per policy update (GRPO: whole groups of group_size)"
    )
    max_grad_norm: float = Field(1.0, gt=0)
    adam_eps: float = Field(1e-8, gt=0, description="Adam's epsilon (RL code often uses 1e-5)")
    kl_coef: float = Field(0.0, ge=0, description="KL anchor to the starting (SFT) policy; 0 = none, as in the paper")
    router_aux_loss_coef: float = Field(
        0.0,
        ge=0,
        description="MoE load-balancing loss (Switch/Mixtral) weight, on every router trained (SAO: the critic's too)",
    )
    loss_aggregation: Aggregation = Field(
        "token_mean",
        description=(
            "how the policy loss averages its tokens: 'token_mean' (every token alike), 'sequence_mean' (every "
            "sequence alike), 'constant' (a sum over loss_normaliser tokens per sequence: Dr. GRPO)"
        ),
    )
    loss_normaliser: float | None = Field(
        None, gt=0, description="tokens per sequence of the 'constant' aggregation (Dr. GRPO: sampling.max_new_tokens)"
    )
    routing_replay: Literal["off", "r2", "r3"] = Field(
        "off",
        description=(
            "MoE routing replay in the training forward (docs/algorithms.md): 'r3' forces the experts the rollout "
            "engine chose (the generating version's), 'r2' the trainer's own choice at the start of the update; gate "
            "weights come from the live router either way"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, args: Any) -> Any:
        return refuse_renamed(args, cls.renamed)

    @model_validator(mode="after")
    def _normaliser_with_constant(self) -> TrainerConfig:
        if (self.loss_aggregation == "constant") != (self.loss_normaliser is not None):
            raise ValueError(
                "loss_normaliser goes with loss_aggregation: constant, and only with it "
                f"(got loss_aggregation: {self.loss_aggregation}, loss_normaliser: {self.loss_normaliser})"
            )
        return self

    def loss_settings(self) -> PolicyLoss:
        """The policy loss this trainer takes, from its own switch (each trainer's Config)."""
        raise NotImplementedError

    def _loss(self, correction: Correction, band: tuple[float, float] = (0.0, 0.0)) -> PolicyLoss:
        return PolicyLoss(correction, *band, self.loss_aggregation, self.loss_normaliser)


class DISBand(BaseModel):
    """DIS's band: a token whose ratio to the engine's log-prob leaves (1 - eps_low, 1 + eps_high) weighs 0."""

    eps_low: float = Field(0.3, gt=0, lt=1, description="DIS band's lower side")
    eps_high: float = Field(5.0, gt=0, description="DIS band's upper side")

    @property
    def dis_band(self) -> tuple[float, float]:
        return self.eps_low, self.eps_high


class PPOClip(BaseModel):
    """PPO's asymmetric clip ("clip-higher"): the ratio clipped to [1 - clip_low, 1 + clip_high]."""

    clip_low: float = Field(0.2, gt=0, lt=1)
    clip_high: float = Field(0.28, gt=0)

    @property
    def clip_band(self) -> tuple[float, float]:
        return self.clip_low, self.clip_high


class Corrections(PPOClip, DISBand):
    """Every correction's band (trainers/losses.py): DIS's, PPO clip's, and TIS's cap, MIS's band and
    the sequence mask's band, as ratios. `band_of` gives the one a `Correction` takes, as PolicyLoss
    offsets from 1 (exact in binary for these values)."""

    tis_cap: float = Field(2.0, gt=1, description="TIS: the cap C on a token's ratio (verl's default threshold)")
    mis_low: float = Field(0.5, gt=0, lt=1, description="MIS / IcePop: a token whose ratio is below weighs 0 (alpha)")
    mis_high: float = Field(5.0, gt=1, description="MIS / IcePop: a token whose ratio is above weighs 0 (beta)")
    seq_mask_low: float = Field(
        0.999, gt=0, lt=1, description="sequence mask: a sequence whose geometric-mean ratio is below weighs 0 (verl)"
    )
    seq_mask_high: float = Field(
        1.001, gt=1, description="sequence mask: a sequence whose geometric-mean ratio is above weighs 0 (verl)"
    )

    def band_of(self, correction: Correction) -> tuple[float, float]:
        if correction == "dis":
            return self.dis_band
        if correction == "ppo_clip":
            return self.clip_band
        if correction == "tis":
            return 0.0, self.tis_cap - 1.0
        if correction == "mis":
            return 1.0 - self.mis_low, self.mis_high - 1.0
        if correction == "seq_mask":
            return 1.0 - self.seq_mask_low, self.seq_mask_high - 1.0
        return 0.0, 0.0
