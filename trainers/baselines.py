"""Critic-free baselines: group baselines (GRPO / RLOO) and the sliding-window running-mean
baseline, with the broadcast of one advantage per sequence to its action tokens. The estimators
with a critic (GAE) are in `trainers/advantages.py`; the conventions are that module's.

The formulas, with where each comes from, are in docs/algorithms.md.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import torch
from torch import Tensor


def _work_dtype(x: Tensor) -> torch.dtype:
    """At least float32, as in `trainers.advantages`: targets are not computed in bf16."""
    return torch.promote_types(x.dtype, torch.float32)


# ----------------------------------------------------------------------------------------------
# 1. Group baselines: GRPO and RLOO
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def group_advantages(
    rewards: Tensor,
    group_ids: Tensor | list[int],
    kind: Literal["grpo", "rloo"] = "grpo",
    eps: float = 1e-6,
) -> Tensor:
    """Per-sequence advantages from a group baseline (one group per prompt).

        grpo: A_i = (R_i - mean_g R) / (std_g R + eps)
              std is the SAMPLE std (Bessel, divide by G - 1), as torch.std and the common
              GRPO implementations (TRL, verl) use.
        rloo: A_i = R_i - mean_{j in g, j != i} R_j = G / (G - 1) * (R_i - mean_g R)

    A group of one gives A = 0 for both: with G = 1 the baseline is the reward itself, so
    GRPO/RLOO cannot learn from one rollout per prompt.
    rewards [N], group_ids [N] (any integer labels). Returns [N].
    """
    if kind not in ("grpo", "rloo"):
        raise ValueError(f"kind must be 'grpo' or 'rloo', got {kind!r}")
    R = rewards.detach().to(_work_dtype(rewards))
    ids = torch.as_tensor(group_ids, device=R.device)
    _, inverse = torch.unique(ids, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0

    size = torch.zeros(n_groups, dtype=R.dtype, device=R.device).index_add_(0, inverse, torch.ones_like(R))
    # Centre on one member of each group before taking the mean: a group of identical rewards then
    # gets exactly 0 (a plain mean can be off by a rounding error, which GRPO's division by
    # std + eps would blow up into an advantage of about +-1).
    n = R.shape[0]
    first = torch.full((n_groups,), n, dtype=torch.long, device=R.device).scatter_reduce_(
        0, inverse, torch.arange(n, device=R.device), reduce="amin"
    )
    shifted = R - R[first][inverse]
    total = torch.zeros(n_groups, dtype=R.dtype, device=R.device).index_add_(0, inverse, shifted)
    G = size[inverse]
    centred = shifted - (total / size)[inverse]
    singleton = G < 2

    if kind == "grpo":
        sq = torch.zeros(n_groups, dtype=R.dtype, device=R.device).index_add_(0, inverse, centred**2)
        std = (sq[inverse] / (G - 1).clamp(min=1)).sqrt()
        adv = centred / (std + eps)
    else:
        adv = G / (G - 1).clamp(min=1) * centred
    return torch.where(singleton, torch.zeros_like(adv), adv)


# ----------------------------------------------------------------------------------------------
# 2. Running-mean baseline
# ----------------------------------------------------------------------------------------------
def broadcast_to_tokens(per_seq: Tensor, action_mask: Tensor) -> Tensor:
    """Broadcast one number per sequence [B] to its action tokens [B, T]; 0 elsewhere."""
    per_seq = torch.as_tensor(per_seq)
    return per_seq.to(device=action_mask.device, dtype=_work_dtype(per_seq)).unsqueeze(1) * action_mask.bool()


class SlidingWindowBaseline:
    """REINFORCE baseline: the mean of the `size` most recent rewards, INCLUDING the current one.

        A_t = r_t - mean(r_{t-size+1 .. t})

    Global (one window, the paper's online experiment with size 128) or per prompt id (one window
    per prompt, the paper's Table 4 variant with size 8). Rewards are processed in batch order:
    each reward is pushed first, then its advantage uses the window at that moment, so a batch
    sees its own earlier rewards. Consequence: the very first reward of a window gets A = 0.
    """

    _GLOBAL = ""  # key of the single window when per_prompt is False

    def __init__(self, size: int = 128, per_prompt: bool = False) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self.per_prompt = per_prompt
        self._windows: dict[str, deque[float]] = {}

    def _window(self, key: str) -> deque[float]:
        if key not in self._windows:
            self._windows[key] = deque(maxlen=self.size)
        return self._windows[key]

    def advantages(self, rewards: list[float], prompt_ids: list[str] | None = None) -> list[float]:
        """Push each reward in order and return r - mean(window) for each."""
        if self.per_prompt:
            if prompt_ids is None or len(prompt_ids) != len(rewards):
                raise ValueError("per_prompt baseline needs one prompt id per reward")
            keys = [str(p) for p in prompt_ids]
        else:
            keys = [self._GLOBAL] * len(rewards)
        out = []
        for r, key in zip(rewards, keys):
            window = self._window(key)
            window.append(float(r))
            out.append(float(r) - sum(window) / len(window))
        return out

    def mean(self, prompt_id: str | None = None) -> float:
        """Current window mean (nan if empty), for logging."""
        key = str(prompt_id) if self.per_prompt else self._GLOBAL
        window = self._windows.get(key)
        return sum(window) / len(window) if window else float("nan")

    def state_dict(self) -> dict:
        return {
            "size": self.size,
            "per_prompt": self.per_prompt,
            "windows": {key: list(w) for key, w in self._windows.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.size = int(state["size"])
        self.per_prompt = bool(state["per_prompt"])
        self._windows = {key: deque(w, maxlen=self.size) for key, w in state["windows"].items()}
