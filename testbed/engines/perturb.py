"""Training-inference mismatch on purpose: the engine samples from, and records, log-probs of
perturbed logits, as a real inference engine's do (bfloat16 kernels, another MoE routing). In
float32 on one CPU the engine and the trainer agree to ~1e-13 in k3 KL, so DIS and the IS ratios
have nothing to correct; clusters report 1e-5..1e-3 for dense models and 1e-3..1e-1 for MoE.

- `logit_rounding: bfloat16`: the logits rounded to bfloat16 before the softmax (what a bf16
  engine's last layer gives);
- `logit_noise: s`: Gaussian noise of standard deviation s on every logit, from the engine's own
  generator (so the sampling stream is unchanged when it is off). For small s the k3 KL between
  engine and trainer is about (s / T)^2 / 2 times (1 - sum p^2): s ~ T * sqrt(2 * KL) aims at a KL.

The measured size is in `updates.parquet`'s `mismatch_*` columns (`engine.mismatch: true`).
"""

from __future__ import annotations

from typing import Literal

import torch


class LogitPerturbation:
    def __init__(self, rounding: Literal["bfloat16"] | None = None, noise: float = 0.0, seed: int = 0):
        if rounding not in (None, "bfloat16"):
            raise ValueError(f"engine.args.logit_rounding must be bfloat16 or unset, got {rounding!r}")
        if noise < 0:
            raise ValueError(f"engine.args.logit_noise must be >= 0, got {noise!r}")
        self.rounding, self.noise = rounding, noise
        self.generator = torch.Generator().manual_seed(seed) if noise > 0 else None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits as the engine samples from them (the same tensor when nothing is on)."""
        if self.rounding == "bfloat16":
            logits = logits.to(torch.bfloat16).float()
        if self.generator is not None:
            noise = torch.randn(logits.shape, generator=self.generator, dtype=torch.float32)
            logits = logits.float() + self.noise * noise.to(logits.device)
        return logits
