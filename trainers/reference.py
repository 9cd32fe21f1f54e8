"""An optional KL anchor to the policy RL started from (the SFT policy), for every trainer.

The paper's trainers use no KL (`kl_coef: 0`, the default). The anchor exists because the testbed's
small policy collapses onto the first target style within a few dozen updates; with no mass left
on the other styles, a switch under an unchanged prompt gives every single-rollout arm zero reward
and zero gradient. A KL penalty keeps pi close to pi_ref * exp(A / kl_coef), i.e. a little mass on
every style the SFT policy wrote (see the README and scenarios/style_shift.yaml).

A LoRA policy (`policy.lora`) is its own reference: the frozen base under the adapters is the
starting policy, so the reference is the same module with the adapters switched off, no copy.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from testbed.models.lora import adapters_disabled, has_adapters
from testbed.models.policy import token_logprobs
from trainers.batching import Batch
from trainers.losses import kl_to_reference


class Reference:
    """A frozen copy of the policy as it was when the trainer was built; for a LoRA policy, the
    policy itself with its adapters off (`shared`)."""

    def __init__(self, policy: torch.nn.Module, coef: float, temperature: float):
        self.shared = has_adapters(policy)
        self.model = policy if self.shared else copy.deepcopy(policy).eval().requires_grad_(False)
        self.coef, self.temperature = coef, temperature

    @torch.no_grad()
    def logprobs(self, data: Batch) -> torch.Tensor:
        with adapters_disabled(self.model) if self.shared else contextlib.nullcontext():
            return token_logprobs(
                self.model, data.tokens, data.attention_mask, self.temperature, where=data.action_mask
            )[0]

    def penalty(self, logprobs: torch.Tensor, ref_logprobs: torch.Tensor, data: Batch) -> tuple[torch.Tensor, float]:
        """(coef x KL to add to the loss, the KL itself for the metrics)."""
        kl = kl_to_reference(logprobs, ref_logprobs, data.action_mask)
        return self.coef * kl, float(kl.detach())


def reference_for(policy: torch.nn.Module, coef: float, temperature: float) -> Reference | None:
    return Reference(policy, coef, temperature) if coef > 0 else None
