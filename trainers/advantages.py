"""Advantage estimators with a critic: observation-skipping GAE (token- and step-level), and
length-adaptive and decoupled lambda. The critic-free baselines (GRPO / RLOO groups, the
sliding-window running mean) are in `trainers/baselines.py`, and importable from here too.

Conventions (shared with `trainers/losses.py`):
  * Batches are padded 2-D tensors [B, T] over the whole sequence (prompt + response).
  * `action_mask` [B, T] bool is True on model-generated tokens only; prompt, observation and
    padding positions are False.
  * `rewards` [B, T] holds per-token rewards; the final reward sits on the last action token.
    Rewards at non-action positions are ignored (an observation is not a decision point).
  * `values` [B, T] holds the critic's per-token values; only action positions are read.
  * Everything here is a target, not part of the graph: inputs are detached, and the maths runs
    in at least float32 (a bf16 reverse scan loses too much precision).

The formulas, with where each comes from, are in docs/algorithms.md.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from trainers.baselines import SlidingWindowBaseline, broadcast_to_tokens, group_advantages

__all__ = [
    "AdvMode",
    "SlidingWindowBaseline",
    "StepMode",
    "broadcast_to_tokens",
    "critic_mask",
    "gae_naive",
    "gae_step_level",
    "gae_token_level",
    "group_advantages",
    "length_adaptive_lambda",
    "policy_and_critic_advantages",
    "response_span",
    "turn_index",
]

StepMode = Literal["average", "last"]
AdvMode = Literal["token", "step_average", "step_last", "naive"]


# ----------------------------------------------------------------------------------------------
# GAE core
# ----------------------------------------------------------------------------------------------
def _work_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _lam_column(lam: float | Tensor, batch: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """lambda as a [B, 1] column, from a float or a per-trajectory tensor [B]."""
    lam_t = torch.as_tensor(lam, dtype=dtype, device=device)
    if lam_t.dim() == 0:
        return lam_t.expand(batch).unsqueeze(1)
    if lam_t.shape != (batch,):
        raise ValueError(f"lam must be a float or a tensor of shape [{batch}], got {tuple(lam_t.shape)}")
    return lam_t.unsqueeze(1)


def _gae_compact(rewards: Tensor, values: Tensor, valid: Tensor, gamma: float, lam: Tensor) -> Tensor:
    """GAE over compacted steps. rewards/values/valid are [B, K], each row's valid steps packed at
    the front (valid[b] = [True]*n_b + [False]*(K - n_b)); lam is [B, 1].

        delta_k = r_k + gamma * V_{k+1} - V_k          (V_{n_b} = 0: nothing after the last step)
        A_k     = delta_k + gamma * lam * A_{k+1}       (A_{n_b} = 0)

    Invalid steps must hold zeros in rewards/values; they get advantage 0.
    """
    B, K = rewards.shape
    advantages = torch.zeros_like(values)
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros(B, dtype=values.dtype, device=values.device)
    gl = gamma * lam.squeeze(1)
    for k in reversed(range(K)):
        delta = rewards[:, k] + gamma * next_value - values[:, k]
        adv = (delta + gl * next_adv) * valid[:, k]
        advantages[:, k] = adv
        # Invalid steps sit after the row's last valid step, so zeros here give V(next) = 0
        # and A(next) = 0 for that last step.
        next_value = values[:, k] * valid[:, k]
        next_adv = adv
    return advantages


def _front_packed(counts: Tensor, width: int) -> Tensor:
    """[B, width] bool with the first counts[b] entries of row b True."""
    return torch.arange(width, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)


# ----------------------------------------------------------------------------------------------
# 1. Observation-skipping token-level GAE
# ----------------------------------------------------------------------------------------------
@torch.no_grad()
def gae_token_level(
    rewards: Tensor,
    values: Tensor,
    action_mask: Tensor,
    gamma: float,
    lam: float | Tensor,
) -> tuple[Tensor, Tensor]:
    """Token-level GAE over action tokens only, as if observation tokens were not there.

    Let a_0 .. a_{n-1} be the row's action positions in order (across turns). Then
        delta_j = r(a_j) + gamma * V(a_{j+1}) - V(a_j),     V(a_n) = 0
        A(a_j)  = delta_j + gamma * lam * A(a_{j+1}),        A(a_n) = 0
    so crossing an observation of any length costs exactly one gamma*lam step.
    returns = A + V at action positions. Non-action tokens get advantage 0 and return 0.

    lam: a float or a per-trajectory tensor [B] (length-adaptive lambda).
    Returns (advantages [B, T], returns [B, T]) in float32 (or float64 if values are float64).
    """
    mask = action_mask.bool()
    B, T = mask.shape
    dtype = _work_dtype(values)

    # Compact: pack each row's action tokens to the front. Boolean indexing walks the tensor in
    # row-major order on both sides, so the within-row order of action tokens is preserved.
    counts = mask.sum(dim=1)
    K = int(counts.max()) if B > 0 else 0
    valid = _front_packed(counts, K)
    r_c = torch.zeros(B, K, dtype=dtype, device=values.device)
    v_c = torch.zeros(B, K, dtype=dtype, device=values.device)
    r_c[valid] = rewards.detach().to(dtype)[mask]
    v_c[valid] = values.detach().to(dtype)[mask]

    adv_c = _gae_compact(r_c, v_c, valid, gamma, _lam_column(lam, B, dtype, values.device))

    # Scatter back; everything that is not an action token stays 0.
    advantages = torch.zeros(B, T, dtype=dtype, device=values.device)
    returns = torch.zeros(B, T, dtype=dtype, device=values.device)
    advantages[mask] = adv_c[valid]
    returns[mask] = (adv_c + v_c)[valid]
    return advantages, returns


def response_span(action_mask: Tensor) -> Tensor:
    """[B, T] bool: every position from a row's first action token to its last, observations
    between turns included (the prompt before and the padding after are not)."""
    mask = action_mask.bool()
    seen = mask.long().cumsum(dim=1) > 0
    ahead = mask.flip(1).long().cumsum(dim=1).flip(1) > 0
    return seen & ahead


def critic_mask(action_mask: Tensor, mode: AdvMode) -> Tensor:
    """Where the critic's targets live: the action tokens, or for "naive" the whole response span."""
    return response_span(action_mask) if mode == "naive" else action_mask.bool()


@torch.no_grad()
def gae_naive(
    rewards: Tensor,
    values: Tensor,
    action_mask: Tensor,
    gamma: float,
    lam: float | Tensor,
) -> tuple[Tensor, Tensor]:
    """The comparison point SAO argues against: token-level GAE that runs across observation
    tokens as if the model had generated them, taking the critic's values there.

    Over every position p_0 .. p_{m-1} of the response span (`response_span`):
        delta_j = r(p_j) + gamma * V(p_{j+1}) - V(p_j),     V(p_m) = 0
        A(p_j)  = delta_j + gamma * lam * A(p_{j+1})
    so an observation of length L costs L+1 gamma*lam steps, not one, and its values enter the
    deltas. Rewards at observation positions are 0. Advantages are returned on action tokens only
    (an observation is never trained on); returns (A + V) on the whole span, for the critic.
    Without observations this is exactly `gae_token_level`.
    """
    mask = action_mask.bool()
    span = response_span(mask)
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    advantages, returns = gae_token_level(rewards, values, span, gamma, lam)
    return advantages * mask, returns


# ----------------------------------------------------------------------------------------------
# 2. Step-level GAE (paper Appendix A ablation)
# ----------------------------------------------------------------------------------------------
def turn_index(action_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Number each action turn (a maximal run of consecutive action tokens) within its row.

    Returns (turn_idx [B, T] long: 0, 1, ... on action tokens and -1 elsewhere,
             n_turns [B] long).
    """
    mask = action_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    starts = mask & ~prev
    turn_idx = torch.where(mask, starts.long().cumsum(dim=1) - 1, torch.full_like(mask, -1, dtype=torch.long))
    return turn_idx, starts.sum(dim=1)


@torch.no_grad()
def gae_step_level(
    rewards: Tensor,
    values: Tensor,
    action_mask: Tensor,
    gamma: float,
    lam: float | Tensor,
    mode: StepMode = "last",
) -> tuple[Tensor, Tensor]:
    """Step-level GAE: one step per action turn (a maximal run of consecutive action tokens).

        V(turn) = mean of its tokens' values ("average") or its last token's value ("last")
        R(turn) = sum of its tokens' rewards
        GAE over turns exactly as in `gae_token_level`, V(after last turn) = 0.
    The turn's advantage and return (A + V(turn)) are broadcast to every token of the turn;
    non-action tokens get 0.

    Returns (advantages [B, T], returns [B, T]).
    """
    if mode not in ("average", "last"):
        raise ValueError(f"mode must be 'average' or 'last', got {mode!r}")
    mask = action_mask.bool()
    B, _T = mask.shape
    dtype = _work_dtype(values)
    device = values.device
    r = torch.where(mask, rewards.detach().to(dtype), 0.0)
    v = torch.where(mask, values.detach().to(dtype), 0.0)

    turn_idx, n_turns = turn_index(mask)
    K = max(int(n_turns.max()) if B > 0 else 0, 1)  # width >= 1 so the scatters below are valid
    valid = _front_packed(n_turns, K)
    index = turn_idx.clamp(min=0)  # non-action tokens add zeros into turn 0, harmless

    turn_rewards = torch.zeros(B, K, dtype=dtype, device=device).scatter_add_(1, index, r)
    if mode == "average":
        turn_sums = torch.zeros(B, K, dtype=dtype, device=device).scatter_add_(1, index, v)
        turn_lens = torch.zeros(B, K, dtype=dtype, device=device).scatter_add_(1, index, mask.to(dtype))
        turn_values = turn_sums / turn_lens.clamp(min=1)
    else:
        nxt = torch.zeros_like(mask)
        nxt[:, :-1] = mask[:, 1:]
        is_last = mask & ~nxt
        turn_values = torch.zeros(B, K, dtype=dtype, device=device)
        turn_values[valid] = v[is_last]  # row-major order: turns come out in order

    turn_adv = _gae_compact(turn_rewards, turn_values, valid, gamma, _lam_column(lam, B, dtype, device))

    # Broadcast each turn's numbers back to its tokens.
    advantages = torch.gather(turn_adv, 1, index) * mask
    returns = torch.gather(turn_adv + turn_values, 1, index) * mask
    return advantages, returns


# ----------------------------------------------------------------------------------------------
# 3. Length-adaptive lambda (VAPO)
# ----------------------------------------------------------------------------------------------
def length_adaptive_lambda(action_lengths: Tensor | list[int], alpha: float) -> Tensor:
    """lambda_policy = 1 - 1 / (alpha * l), l = the response's number of action tokens.

    Clamped to [0, 1]: for alpha * l < 1 (short responses, or VAPO's alpha = 0.05) the raw
    formula is negative, which would flip the sign of the bootstrapped tail; l = 0 gives 0.
    Returns a float32 tensor [B].
    """
    lengths = torch.as_tensor(action_lengths, dtype=torch.float32)
    return (1.0 - 1.0 / (alpha * lengths)).clamp(0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# 4. Decoupled lambda: policy advantages and critic targets
# ----------------------------------------------------------------------------------------------
def policy_and_critic_advantages(
    rewards: Tensor,
    values: Tensor,
    action_mask: Tensor,
    gamma: float,
    lam_policy: float | Tensor,
    lam_critic: float | Tensor = 1.0,
    mode: AdvMode = "token",
) -> tuple[Tensor, Tensor]:
    """Decoupled lambda (VAPO): the policy's advantages use lam_policy, the critic's targets
    (returns = A + V) use lam_critic (1.0: Monte-Carlo returns, unbiased by the critic).

    mode: "token" (observation-skipping token-level GAE), "step_average", "step_last" or "naive"
    (GAE across observation tokens; its critic returns cover the whole response span).
    Returns (policy_advantages [B, T], critic_returns [B, T]).
    """
    if mode == "token":

        def gae(lam):
            return gae_token_level(rewards, values, action_mask, gamma, lam)
    elif mode == "naive":

        def gae(lam):
            return gae_naive(rewards, values, action_mask, gamma, lam)
    elif mode in ("step_average", "step_last"):
        step_mode: StepMode = "average" if mode == "step_average" else "last"

        def gae(lam):
            return gae_step_level(rewards, values, action_mask, gamma, lam, mode=step_mode)
    else:
        raise ValueError(f"mode must be 'token', 'step_average', 'step_last' or 'naive', got {mode!r}")

    advantages, _ = gae(lam_policy)
    _, returns = gae(lam_critic)
    return advantages, returns
