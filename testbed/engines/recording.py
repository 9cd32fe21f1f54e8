"""The expert ids an engine routes each fed token to, as it decodes a batch (testbed/models/routing.py
says what a Trajectory carries). The HF engine feeds left-padded contexts [B, W] at once, then one
token per row per step; a row's fed positions are its context's W - n..W - 1 and the columns of the
steps whose token it kept, all but the last (never fed). One table per batch, on the model's
device, copied to the CPU once."""

from __future__ import annotations

import numpy as np
import torch

from testbed.models.routing import UNRECORDED, compact


class ExpertRecorder:
    """[B, W + steps, L, k] expert ids in the engine's columns (UNRECORDED where nothing was fed)."""

    def __init__(self, num_experts: int):
        self.num_experts = num_experts
        self.table: torch.Tensor | None = None
        self.width = 0

    def prefill(self, ids: torch.Tensor | None, steps: int) -> None:
        """The contexts' ids [B, W, L, k] (None: the model has no router, nothing is recorded)."""
        if ids is None:
            self.table = None
            return
        batch, width, layers, k = ids.shape
        self.width = width
        self.table = torch.full((batch, width + steps, layers, k), UNRECORDED, dtype=torch.int16, device=ids.device)
        self.table[:, :width] = ids

    def step(self, rows: torch.Tensor, step: int, ids: torch.Tensor | None) -> None:
        """The ids [rows, L, k] of the tokens sampled at `step`, fed for the rows still decoding."""
        if self.table is not None and ids is not None:
            self.table[rows, self.width + step] = ids.to(self.table.dtype)

    def records(self, context_lengths: list[int], kept: list[int]) -> list[np.ndarray | None]:
        """Per row, its fed positions' ids [n + kept - 1, L, k] (its context of n tokens, then all
        but the last of its `kept` tokens)."""
        if self.table is None:
            return [None] * len(context_lengths)
        table = self.table.cpu()
        w = self.width
        return [
            compact(table[row, w - n : w + length - 1], self.num_experts)
            for row, (n, length) in enumerate(zip(context_lengths, kept))
        ]


def extended(before: np.ndarray | None, fed_before: int, after: np.ndarray | None) -> np.ndarray | None:
    """A multi-turn trajectory's record after another draft: the positions recorded before kept (the
    routing their log-probs were sampled under, as a prefix cache would keep it), the rest from the
    new turn's record of the whole context. None when either turn recorded nothing."""
    if before is None or after is None:
        return None
    return np.concatenate([before[:fed_before], after[fed_before:]])
