"""Turn a list of Trajectories into the padded tensors the losses work on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from testbed.models.routing import expert_table
from testbed.types import Trajectory


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor  # [B, T] long
    action_mask: torch.Tensor  # [B, T] bool: model-generated tokens
    behaviour_logprobs: torch.Tensor  # [B, T] float, 0 off actions
    rewards: torch.Tensor  # [B, T] float: the episode reward on its last action token (multi-turn with
    #                         turn rewards: each draft's reward on its own last token)
    episode_rewards: torch.Tensor  # [B]
    action_lengths: torch.Tensor  # [B]
    # [B, T, L, k] long: the expert ids the engine routed each fed token to (-1: none recorded, the
    # last token and padding); None when no episode carries them (testbed/models/routing.py)
    experts: torch.Tensor | None = None


def collate(trajectories: list[Trajectory], pad_id: int, device: torch.device | str | None = None) -> Batch:
    """The padded batch, built on the CPU row by row and moved to `device` (the trainer's policy's;
    None: the CPU) in one copy per tensor."""
    layouts = [t.token_layout() for t in trajectories]
    width = max(len(toks) for toks, _, _ in layouts)
    n = len(layouts)
    tokens = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    action = torch.zeros((n, width), dtype=torch.bool)
    behaviour = torch.zeros((n, width))
    rewards = torch.zeros((n, width))
    for row, ((toks, mask, lps), traj) in enumerate(zip(layouts, trajectories)):
        length = len(toks)
        tokens[row, :length] = toks
        attention[row, :length] = 1
        action[row, :length] = mask
        behaviour[row, :length] = lps
        start = len(traj.prompt_tokens)
        for offset, reward in traj.token_rewards():  # the final reward on the last action token
            rewards[row, start + offset] = reward
    episode_rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float)
    experts = expert_table([t.experts for t in trajectories], width)
    batch = Batch(tokens, attention, action, behaviour, rewards, episode_rewards, action.sum(1), experts)
    if device is not None and torch.device(device) != tokens.device:
        batch = map_tensors(batch, lambda x: x.to(device))
    return batch


def map_tensors(batch: Batch, fn: Callable[[torch.Tensor], torch.Tensor]) -> Batch:
    """The batch with `fn` applied to each of its tensors (a field that is None stays None)."""
    mapped: dict[str, Any] = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        mapped[f.name] = None if value is None else fn(value)
    return Batch(**mapped)
