"""Policy and value losses: the policy-gradient loss with its correction (DIS, SAO's; PPO clip;
TIS; MIS / IcePop; the sequence mask; none: REINFORCE) and its aggregation as switches, the KL to
a reference, the value MSE, and explained variance. Pure functions on [B, T] tensors;
`action_mask` selects the tokens that count.

The default aggregation is the token mean over action tokens (`token_mean`): every action token in
the batch has the same weight, whatever its sequence's length. Advantages and returns are treated
as constants (detached). The formulas are in docs/algorithms.md.

A new correction is one function of `CORRECTIONS`'s shape and its name in `Correction`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

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
# The policy loss: one per-token policy gradient, its correction and its aggregation as switches
# ----------------------------------------------------------------------------------------------
Correction = Literal["dis", "ppo_clip", "none", "tis", "mis", "seq_mask"]
Aggregation = Literal["token_mean", "sequence_mean", "constant"]


@dataclass(frozen=True)
class PolicyLoss:
    """Which policy loss `policy_gradient_loss` computes (each trainer's Config says, `loss_settings`).

    `low`, `high`: the correction's bounds as offsets from ratio 1 (DIS: eps_low, eps_high, the
    open band (1 - low, 1 + high); PPO clip: clip_low, clip_high, the clip [1 - low, 1 + high];
    TIS: the cap 1 + high; MIS and the sequence mask: the closed band [1 - low, 1 + high]; none:
    unused; trainers/config.py's settings give them). `normaliser`: the constant aggregation's tokens per
    sequence (Dr. GRPO: the generation budget, sampling.max_new_tokens)."""

    correction: Correction = "dis"
    low: float = 0.3
    high: float = 5.0
    aggregation: Aggregation = "token_mean"
    normaliser: float | None = None

    def __post_init__(self) -> None:
        if self.aggregation == "constant" and not self.normaliser:
            raise ValueError("the constant aggregation needs its normaliser (tokens per sequence)")


def policy_gradient_loss(
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    action_mask: Tensor,
    loss: PolicyLoss,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The per-token policy-gradient loss against the rollout engine's log-probs, with

        r_t = exp(log pi_theta(a_t) - log pi_behaviour(a_t))

    and a surrogate s_t per action token, by `loss.correction`:

        none      s_t = A_t log pi_theta(a_t)                              (plain REINFORCE)
        dis       s_t = sg(f(r_t)) A_t log pi_theta(a_t),                  (SAO's DIS)
                  f(r) = r if 1 - low < r < 1 + high else 0  (strict; out-of-band tokens weigh 0
                  whatever A's sign, and the weight carries no gradient)
        ppo_clip  s_t = min(r_t A_t, clip(r_t, 1 - low, 1 + high) A_t)     (PPO, "clip-higher")
        tis       s_t = sg(min(r_t, 1 + high)) A_t log pi_theta(a_t)       (truncated IS)
        mis       s_t = sg(r_t 1[1 - low <= r_t <= 1 + high]) A_t log pi_theta(a_t)   (IcePop)
        seq_mask  s_t = sg(r_t 1[1 - low <= rho_i <= 1 + high]) A_t log pi_theta(a_t),
                  rho_i = exp(mean_{t in i} log r_t), the geometric-mean ratio of t's sequence i

    averaged over the N action tokens by `loss.aggregation` (B rows, n_i action tokens in row i):

        token_mean     L = -(1/N) sum_t s_t                     (every token weighs the same)
        sequence_mean  L = -(1/B) sum_i (1/n_i) sum_{t in i} s_t (every sequence weighs the same)
        constant       L = -(1/C) sum_t s_t, C = B x normaliser (Dr. GRPO: no length bias)

    `denominator` replaces N, B or C: a micro-batch's share of the whole batch's
    (`micro_batch_denominator`). Advantages are constants (detached).

    stats: the correction's own (dis_masked_frac: share of action tokens out of band; clip_frac:
    share whose gradient the clip cuts, (A > 0 and r > 1 + high) or (A < 0 and r < 1 - low);
    tis_truncated_frac, mis_masked_frac, seq_masked_frac: see each function), then ratio_mean and
    approx_kl (k3) over the action tokens.
    """
    mask = action_mask.bool()
    dtype = _float_like(logprobs)
    logp = logprobs.to(dtype)
    log_ratio = logp - behaviour_logprobs.detach().to(dtype)
    surrogate, stats = CORRECTIONS[loss.correction](logp, log_ratio, advantages.detach().to(dtype), mask, loss)
    ratio_mean, approx_kl = _ratio_stats(log_ratio.detach(), mask)
    return -_aggregate(surrogate, mask, loss, denominator), {**stats, "ratio_mean": ratio_mean, "approx_kl": approx_kl}


# A correction: (log pi_theta, log r with its gradient, A, action mask, settings) -> (s_t, stats).
CorrectionFn = Callable[[Tensor, Tensor, Tensor, Tensor, PolicyLoss], tuple[Tensor, dict[str, float]]]


def _none(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    return A * logp, {}


def _dis(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    ratio = log_ratio.detach().exp()  # sg(f(r)) is a constant weight: the gradient flows through log pi only
    in_band = (ratio > 1.0 - loss.low) & (ratio < 1.0 + loss.high)
    weight = torch.where(in_band, ratio, torch.zeros_like(ratio))
    return weight * A * logp, {"dis_masked_frac": _share(~in_band, mask)}


def _ppo_clip(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    ratio = log_ratio.exp()
    surrogate = torch.minimum(ratio * A, ratio.clamp(1.0 - loss.low, 1.0 + loss.high) * A)
    r = ratio.detach()
    clipped = ((A > 0) & (r > 1.0 + loss.high)) | ((A < 0) & (r < 1.0 - loss.low))
    return surrogate, {"clip_frac": _share(clipped, mask)}


def _tis(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    """Truncated importance sampling (verl's token TIS, TRL's token_truncate):

        s_t = sg(min(r_t, C)) A_t log pi_theta(a_t),   C = 1 + high

    tis_truncated_frac: the share of action tokens whose ratio exceeds C (their weight is C)."""
    ratio = log_ratio.detach().exp()
    cap = 1.0 + loss.high
    return ratio.clamp(max=cap) * A * logp, {"tis_truncated_frac": _share(ratio > cap, mask)}


def _mis(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    """Masked importance sampling, IcePop's token mask (verl's rollout_is_threshold "low_high"):

        s_t = sg(r_t 1[1 - low <= r_t <= 1 + high]) A_t log pi_theta(a_t)

    DIS with a closed band: only the band's edges and its default differ (IcePop [0.5, 5]; DIS's
    (0.7, 6)). mis_masked_frac: the share of action tokens outside the band (weight 0)."""
    ratio = log_ratio.detach().exp()
    in_band = (ratio >= 1.0 - loss.low) & (ratio <= 1.0 + loss.high)
    weight = torch.where(in_band, ratio, torch.zeros_like(ratio))
    return weight * A * logp, {"mis_masked_frac": _share(~in_band, mask)}


def _seq_mask(logp: Tensor, log_ratio: Tensor, A: Tensor, mask: Tensor, loss: PolicyLoss) -> tuple[Tensor, dict]:
    """The sequence mask: a whole sequence weighs 0 when its geometric-mean ratio over its action
    tokens leaves the band (verl's Geo-RS, seq_mean_k1), its tokens keep their ratio otherwise:

        rho_i = exp((1 / n_i) sum_{t in i} log r_t),   s_t = sg(r_t 1[1 - low <= rho_i <= 1 + high]) A_t log pi

    seq_masked_frac: the share of action tokens in dropped sequences (token-weighted, so it adds up
    over micro-batches like every token mean)."""
    log_r = torch.where(mask, log_ratio.detach(), torch.zeros_like(log_ratio))
    geometric = (log_r.sum(-1) / mask.sum(-1).clamp(min=1)).exp()  # [B]
    kept = ((geometric >= 1.0 - loss.low) & (geometric <= 1.0 + loss.high))[:, None].expand_as(mask)
    ratio = log_ratio.detach().exp()
    weight = torch.where(kept, ratio, torch.zeros_like(ratio))
    return weight * A * logp, {"seq_masked_frac": _share(~kept, mask)}


CORRECTIONS: dict[str, CorrectionFn] = {
    "none": _none,
    "dis": _dis,
    "ppo_clip": _ppo_clip,
    "tis": _tis,
    "mis": _mis,
    "seq_mask": _seq_mask,
}


def _share(flags: Tensor, mask: Tensor) -> float:
    """The share of the action tokens where `flags` holds."""
    return float((mask & flags).sum() / mask.sum().clamp(min=1))


def _aggregate(x: Tensor, mask: Tensor, loss: PolicyLoss, denominator: float | None) -> Tensor:
    if loss.aggregation == "token_mean" and denominator is None:
        return token_mean(x, mask)
    masked = torch.where(mask, x, torch.zeros_like(x))
    if loss.aggregation == "sequence_mean":
        masked = masked.sum(-1) / mask.sum(-1).clamp(min=1)  # each row's own mean
    if denominator is None:
        denominator = batch_denominator(loss, mask.shape[0], int(mask.sum()))
    return masked.sum() / denominator


def batch_denominator(loss: PolicyLoss, rows: float, tokens: float) -> float:
    """N, B or C of a batch of `rows` rows holding `tokens` action tokens (`policy_gradient_loss`)."""
    if loss.aggregation == "token_mean":
        return max(tokens, 1)
    if loss.aggregation == "sequence_mean":
        return max(rows, 1)
    assert loss.normaliser is not None  # PolicyLoss checks it
    return max(rows, 1) * loss.normaliser


def micro_batch_denominator(loss: PolicyLoss, rows: float, tokens: float, piece_tokens: float) -> float | None:
    """The `denominator` of a micro-batch holding `piece_tokens` of a batch's `tokens` action tokens
    in `rows` rows. The trainers weight a micro-batch's loss by its token share w = piece_tokens /
    tokens (trainers/micro_batch.py), so its denominator is the batch's times w; None for the token
    mean (its own count is that already). A micro-batch without action tokens: 1 (its sum is 0)."""
    if loss.aggregation == "token_mean":
        return None
    if piece_tokens <= 0:
        return 1.0
    return batch_denominator(loss, rows, tokens) * piece_tokens / tokens


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
