"""Policy and value losses: DIS (SAO's policy loss), PPO-clip, REINFORCE, the value MSE, and
explained variance. Pure functions on [B, T] tensors; `action_mask` selects the tokens that count.

Aggregation everywhere is the token mean over action tokens (`token_mean`): every action token in
the batch has the same weight, whatever its sequence's length. Advantages and returns are treated
as constants (detached). The formulas are in docs/algorithms.md.
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_mean(x: Tensor, mask: Tensor) -> Tensor:
    """sum_{mask} x / #mask, and 0 when the mask is empty.

    Unmasked entries are selected away with `where`, not multiplied by 0, so inf/nan there
    (e.g. log-probs at padding) neither leak into the value nor into the gradient.
    """
    mask = mask.bool()
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / mask.sum().clamp(min=1)


def _ratio_stats(log_ratio: Tensor, mask: Tensor) -> tuple[float, float]:
    """(mean ratio, approx KL(behaviour || current)) over masked tokens, from the detached log-ratio
    log r = log pi_theta - log pi_behaviour.

    approx_kl uses the k3 estimator (Schulman, "Approximating KL divergence"):
        k3 = (r - 1) - log r
    unbiased for KL(behaviour || current) under behaviour samples, and never negative (k1 = -log r,
    the plain "behaviour - current log-prob", is unbiased too but noisy and often negative).
    """
    ratio = log_ratio.exp()
    ratio_mean = token_mean(ratio, mask)
    approx_kl = token_mean((ratio - 1.0) - log_ratio, mask)
    return float(ratio_mean), float(approx_kl)


def _float_like(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


# ----------------------------------------------------------------------------------------------
# Policy losses
# ----------------------------------------------------------------------------------------------
def dis_policy_loss(
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    action_mask: Tensor,
    eps_low: float = 0.3,
    eps_high: float = 5.0,
) -> tuple[Tensor, dict[str, float]]:
    """DIS: direct double-sided importance sampling against the rollout engine's log-probs.

        r_t  = exp(log pi_theta(a_t) - log pi_rollout(a_t))
        f(r) = r  if 1 - eps_low < r < 1 + eps_high  else 0       (strict inequalities)
        L    = - token_mean_{action tokens}[ sg(f(r_t)) * A_t * log pi_theta(a_t) ]

    Out-of-band tokens are masked out entirely (weight 0, not clamped), whatever A's sign; they
    still count in the denominator (the mean runs over all action tokens). The weight carries no
    gradient, so d L / d log pi_theta(a_t) = -f(r_t) * A_t / N.

    stats: dis_masked_frac (share of action tokens out of band), ratio_mean, approx_kl (k3).
    """
    mask = action_mask.bool()
    dtype = _float_like(logprobs)
    # Why detached: sg(f(r)) is a constant weight; the gradient flows through log pi_theta only.
    log_ratio = logprobs.detach().to(dtype) - behaviour_logprobs.detach().to(dtype)
    ratio = log_ratio.exp()
    in_band = (ratio > 1.0 - eps_low) & (ratio < 1.0 + eps_high)
    weight = torch.where(in_band, ratio, torch.zeros_like(ratio))

    loss = -token_mean(weight * advantages.detach().to(dtype) * logprobs.to(dtype), mask)

    n = mask.sum().clamp(min=1)
    ratio_mean, approx_kl = _ratio_stats(log_ratio, mask)
    stats = {
        "dis_masked_frac": float((mask & ~in_band).sum() / n),
        "ratio_mean": ratio_mean,
        "approx_kl": approx_kl,
    }
    return loss, stats


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    action_mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with an asymmetric clip ("clip-higher"), token mean:

        r_t = exp(log pi_theta(a_t) - log pi_old(a_t))
        L   = - token_mean[ min(r_t * A_t, clip(r_t, 1 - clip_low, 1 + clip_high) * A_t) ]

    stats: clip_frac = share of action tokens whose gradient the clip cuts, i.e.
    (A > 0 and r > 1 + clip_high) or (A < 0 and r < 1 - clip_low); ratio_mean; approx_kl (k3).
    """
    mask = action_mask.bool()
    dtype = _float_like(logprobs)
    A = advantages.detach().to(dtype)
    log_ratio = logprobs.to(dtype) - old_logprobs.detach().to(dtype)
    ratio = log_ratio.exp()
    surr_unclipped = ratio * A
    surr_clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * A
    loss = -token_mean(torch.minimum(surr_unclipped, surr_clipped), mask)

    r = ratio.detach()
    clipped = ((A > 0) & (r > 1.0 + clip_high)) | ((A < 0) & (r < 1.0 - clip_low))
    ratio_mean, approx_kl = _ratio_stats(log_ratio.detach(), mask)
    stats = {
        "clip_frac": float((mask & clipped).sum() / mask.sum().clamp(min=1)),
        "ratio_mean": ratio_mean,
        "approx_kl": approx_kl,
    }
    return loss, stats


def reinforce_loss(logprobs: Tensor, advantages: Tensor, action_mask: Tensor) -> Tensor:
    """Plain (on-policy) REINFORCE: L = - token_mean[ A_t * log pi_theta(a_t) ]."""
    dtype = _float_like(logprobs)
    return -token_mean(advantages.detach().to(dtype) * logprobs.to(dtype), action_mask)


def kl_to_reference(logprobs: Tensor, ref_logprobs: Tensor, action_mask: Tensor) -> Tensor:
    """KL(pi_theta || pi_ref) per action token by the k3 estimator on the sampled tokens,
    token_mean[ exp(d) - d - 1 ] with d = log pi_ref(a_t) - log pi_theta(a_t): unbiased,
    never negative, and its gradient pulls pi_theta towards pi_ref (the reference is constant)."""
    dtype = _float_like(logprobs)
    mask = action_mask.bool()
    d = torch.where(mask, ref_logprobs.detach().to(dtype) - logprobs.to(dtype), logprobs.new_zeros((), dtype=dtype))
    return token_mean(torch.exp(d) - d - 1.0, mask)


# ----------------------------------------------------------------------------------------------
# Value loss and diagnostics
# ----------------------------------------------------------------------------------------------
def value_loss(
    values: Tensor,
    returns: Tensor,
    action_mask: Tensor,
    old_values: Tensor | None = None,
    clip: float | None = None,
) -> Tensor:
    """Critic regression on action tokens: L = 0.5 * token_mean[ (V - G)^2 ].

    With `clip` set (PPO value clipping, off by default), the pessimistic form
        V_clip = V_old + clip(V - V_old, -clip, clip)
        L      = 0.5 * token_mean[ max((V - G)^2, (V_clip - G)^2) ]
    """
    dtype = _float_like(values)
    v = values.to(dtype)
    g = returns.detach().to(dtype)
    err = (v - g) ** 2
    if clip is not None:
        if old_values is None:
            raise ValueError("value clipping needs old_values")
        old = old_values.detach().to(dtype)
        v_clipped = old + (v - old).clamp(-clip, clip)
        err = torch.maximum(err, (v_clipped - g) ** 2)
    return 0.5 * token_mean(err, action_mask)


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """EV = 1 - Var(G - V) / Var(G) over masked tokens (population variances; the ratio does not
    depend on the choice). 1: perfect critic; 0: no better than a constant; < 0: worse.

    Returns nan when Var(G) = 0 or no token is masked: EV is undefined then, and nan shows up as
    a gap in a plot instead of a misleading number.
    """
    mask = mask.bool()
    g = returns.detach().to(_float_like(returns))[mask]
    v = values.detach().to(g.dtype)[mask]
    if g.numel() == 0:
        return float("nan")
    var_g = g.var(unbiased=False)
    if var_g == 0:
        return float("nan")
    return float(1.0 - (g - v).var(unbiased=False) / var_g)
