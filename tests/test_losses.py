"""Hand-computed checks for trainers/losses.py (values and autograd gradients)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from trainers.losses import (
    PolicyLoss,
    explained_variance,
    micro_batch_denominator,
    policy_gradient_loss,
    token_mean,
    value_loss,
)

D = torch.float64
DIS, PPO, NONE = PolicyLoss("dis", 0.3, 5.0), PolicyLoss("ppo_clip", 0.2, 0.28), PolicyLoss("none")


def dis_policy_loss(logprobs, behaviour, A, mask, eps_low=0.3, eps_high=5.0):
    return policy_gradient_loss(logprobs, behaviour, A, mask, PolicyLoss("dis", eps_low, eps_high))


def ppo_clip_loss(logprobs, old, A, mask, clip_low=0.2, clip_high=0.28):
    return policy_gradient_loss(logprobs, old, A, mask, PolicyLoss("ppo_clip", clip_low, clip_high))


def reinforce_loss(logprobs, A, mask):
    """REINFORCE is the correction `none`: the behaviour log-probs only feed its ratio statistics."""
    return policy_gradient_loss(logprobs, torch.zeros_like(logprobs), A, mask, NONE)[0]


def t(*xs: float) -> torch.Tensor:
    return torch.tensor([list(xs)], dtype=D)


def test_token_mean():
    x = t(1.0, 2.0, float("nan"), 6.0)
    mask = torch.tensor([[True, True, False, True]])
    assert_close(token_mean(x, mask), torch.tensor(3.0, dtype=D))
    assert_close(token_mean(x, torch.zeros_like(mask)), torch.tensor(0.0, dtype=D))


# ----------------------------------------------------------------------------------------------
# DIS
# ----------------------------------------------------------------------------------------------
def _dis_setup(ratios: list[float], advs: list[float], pad: int = 1):
    """behaviour log-probs b, current log-probs b + log r; `pad` trailing non-action tokens with
    junk log-probs (a huge ratio) that must be ignored."""
    behaviour = torch.tensor([[-1.0] * len(ratios) + [-1.0] * pad], dtype=D)
    log_r = torch.log(torch.tensor([ratios + [1.0] * pad], dtype=D))
    logprobs = (behaviour + log_r).detach()
    logprobs[0, len(ratios) :] = 50.0
    logprobs.requires_grad_(True)
    A = torch.tensor([advs + [7.0] * pad], dtype=D)
    mask = torch.tensor([[True] * len(ratios) + [False] * pad])
    return logprobs, behaviour, A, mask


def test_dis_band_edges_and_gradients():
    eps_low, eps_high = 0.3, 5.0
    # exact edges 0.7 and 6.0 are masked (strict), just inside kept, far outside masked
    ratios = [0.7, 0.7 + 1e-9, 6.0 - 1e-9, 6.0, 1.0, 0.5, 7.0, 0.7, 6.0]
    advs = [1.0, 1.0, -2.0, -2.0, 0.5, 1.0, -1.0, -3.0, 3.0]
    kept = torch.tensor([False, True, True, False, True, False, False, False, False])
    logprobs, behaviour, A, mask = _dis_setup(ratios, advs)
    # sanity: the test really sits on the edges
    r = torch.exp(logprobs.detach() - behaviour)[0, : len(ratios)]
    assert r[0].item() == 1 - eps_low and r[3].item() == 1 + eps_high

    loss, stats = dis_policy_loss(logprobs, behaviour, A, mask, eps_low, eps_high)
    loss.backward()

    N = len(ratios)  # mean over ALL action tokens, masked ones contribute 0
    A0, lp0 = A[0, :N], logprobs.detach()[0, :N]
    r_kept = torch.where(kept, r, torch.zeros_like(r))
    assert_close(loss, -(r_kept * A0 * lp0).sum() / N)
    # kept tokens: dL/dlogp = -A * r / N (weight is a constant); masked tokens: exactly 0 for A > 0
    # and A < 0 alike; padding: 0
    expected_grad = torch.cat([-A0 * r_kept / N, torch.zeros(1, dtype=D)])
    assert_close(logprobs.grad[0], expected_grad)
    assert (logprobs.grad[0, :N][~kept] == 0).all()
    assert stats["dis_masked_frac"] == pytest.approx(6 / 9)
    assert stats["ratio_mean"] == pytest.approx(r.mean().item())


def test_dis_stop_gradient_on_weight():
    # With log-probs far from 0, a weight carrying gradient would add -A * r * logp / N.
    logprobs, behaviour, A, mask = _dis_setup([1.2, 0.9], [2.0, -1.0], pad=0)
    loss, _ = dis_policy_loss(logprobs, behaviour, A, mask)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert_close(grad, t(-2.0 * 1.2 / 2, 1.0 * 0.9 / 2))
    assert not torch.allclose(grad, -A * (1 + logprobs.detach()) * t(1.2, 0.9) / 2)


def test_dis_approx_kl_is_k3():
    logprobs, behaviour, A, mask = _dis_setup([1.5, 0.8], [1.0, 1.0])
    _, stats = dis_policy_loss(logprobs, behaviour, A, mask)
    k3 = [(x - 1) - math.log(x) for x in (1.5, 0.8)]
    assert stats["approx_kl"] == pytest.approx(sum(k3) / 2)
    assert stats["dis_masked_frac"] == 0.0


# ----------------------------------------------------------------------------------------------
# PPO clip
# ----------------------------------------------------------------------------------------------
def test_ppo_clip_values_and_gradients_at_edges():
    lo, hi, d = 0.2, 0.28, 1e-6
    #          A>0: above hi (clipped), below hi, below lo (not clipped), at hi
    #          A<0: below lo (clipped), above lo, above hi (not clipped), at lo
    ratios = [1 + hi + d, 1 + hi - d, 1 - lo - d, 1 + hi, 1 - lo - d, 1 - lo + d, 1 + hi + d, 1 - lo]
    advs = [2.0, 2.0, 2.0, 2.0, -1.0, -1.0, -1.0, -1.0]
    cut = torch.tensor([True, False, False, False, True, False, False, False])
    old = torch.full((1, 9), -2.0, dtype=D)
    logprobs = (old + torch.log(torch.tensor([ratios + [1.0]], dtype=D))).detach().requires_grad_(True)
    A = torch.tensor([advs + [5.0]], dtype=D)
    mask = torch.tensor([[True] * 8 + [False]])

    loss, stats = ppo_clip_loss(logprobs, old, A, mask, lo, hi)
    loss.backward()

    r = torch.tensor(ratios, dtype=D)
    A0 = A[0, :8]
    surr = torch.minimum(r * A0, r.clamp(1 - lo, 1 + hi) * A0)
    assert_close(loss, -surr.mean())
    # hand values for the clipped ones: the surrogate is pinned at the edge
    assert_close(surr[0], torch.tensor(2.0 * (1 + hi), dtype=D))
    assert_close(surr[4], torch.tensor(-1.0 * (1 - lo), dtype=D))
    # d/dlogp of r*A is r*A; the clip cuts it to 0
    grad = logprobs.grad[0]
    assert_close(grad[:8][cut], torch.zeros(2, dtype=D))
    not_cut = ~cut
    not_cut[3] = not_cut[7] = False  # exactly-at-edge ties: value checked above, gradient not pinned
    assert_close(grad[:8][not_cut], (-r * A0 / 8)[not_cut])
    assert grad[8] == 0
    assert stats["clip_frac"] == pytest.approx(2 / 8)


def test_ppo_on_policy_equals_reinforce_gradient():
    # r = 1 everywhere: PPO's gradient equals REINFORCE's
    lp = torch.tensor([[-0.5, -1.5, -2.0]], dtype=D, requires_grad=True)
    A = t(1.0, -2.0, 0.5)
    mask = torch.tensor([[True, True, True]])
    loss, stats = ppo_clip_loss(lp, lp.detach(), A, mask)
    (g_ppo,) = torch.autograd.grad(loss, lp)
    (g_rf,) = torch.autograd.grad(reinforce_loss(lp, A, mask), lp)
    assert_close(g_ppo, g_rf)
    assert stats["clip_frac"] == 0.0 and stats["approx_kl"] == 0.0


def test_reinforce_loss():
    lp = torch.tensor([[-0.5, -1.5, 9.0]], dtype=D, requires_grad=True)
    A = t(1.0, -2.0, 4.0)
    mask = torch.tensor([[True, True, False]])
    loss = reinforce_loss(lp, A, mask)
    assert_close(loss, torch.tensor(-(1.0 * -0.5 + -2.0 * -1.5) / 2, dtype=D))
    loss.backward()
    assert_close(lp.grad, t(-0.5, 1.0, 0.0))


def test_reinforce_reports_the_ratio_to_the_engine_and_ignores_it_in_the_gradient():
    lp = torch.tensor([[-1.0, -2.0]], dtype=D, requires_grad=True)
    behaviour = t(-1.0 - math.log(2.0), -2.0)  # ratios 2 and 1
    loss, stats = policy_gradient_loss(lp, behaviour, t(1.0, 1.0), torch.ones(1, 2, dtype=torch.bool), NONE)
    loss.backward()
    assert_close(lp.grad, t(-0.5, -0.5))  # -A / N, whatever the ratio
    assert stats["ratio_mean"] == pytest.approx(1.5)
    assert stats["approx_kl"] == pytest.approx(((2 - 1) - math.log(2)) / 2)
    assert "dis_masked_frac" not in stats and "clip_frac" not in stats


# ----------------------------------------------------------------------------------------------
# Aggregation: token mean, sequence mean, constant normaliser (Dr. GRPO)
# ----------------------------------------------------------------------------------------------
# Two rows: 3 action tokens with s = A log pi = 1 x (-1, -2, -3), and 1 action token with s = 2 x -4;
# the last column of row 0 and the last three of row 1 are padding with junk that must not count.
LOGP = [[-1.0, -2.0, -3.0, 50.0], [-4.0, 50.0, 50.0, 50.0]]
ADV = [[1.0, 1.0, 1.0, 9.0], [2.0, 9.0, 9.0, 9.0]]
MASK = [[True, True, True, False], [True, False, False, False]]


def aggregated(aggregation: str, normaliser: float | None = None, denominator: float | None = None):
    lp = torch.tensor(LOGP, dtype=D, requires_grad=True)
    spec = PolicyLoss("none", aggregation=aggregation, normaliser=normaliser)
    loss, _ = policy_gradient_loss(lp, lp.detach(), torch.tensor(ADV, dtype=D), torch.tensor(MASK), spec, denominator)
    loss.backward()
    return float(loss.detach()), lp.grad


def test_token_mean_weighs_every_token_alike():
    loss, grad = aggregated("token_mean")
    assert loss == pytest.approx(-(-1 - 2 - 3 - 8) / 4)  # 3.5
    assert_close(grad, torch.tensor([[-0.25, -0.25, -0.25, 0.0], [-0.5, 0.0, 0.0, 0.0]], dtype=D))


def test_sequence_mean_weighs_every_sequence_alike():
    loss, grad = aggregated("sequence_mean")
    # row means -2 and -8, their mean -5: the short row's token weighs 1/2, each long row's 1/6
    assert loss == pytest.approx(5.0)
    assert_close(grad, torch.tensor([[-1 / 6, -1 / 6, -1 / 6, 0.0], [-1.0, 0.0, 0.0, 0.0]], dtype=D))


def test_constant_normaliser_divides_the_sum_by_rows_times_the_budget():
    loss, grad = aggregated("constant", normaliser=8)
    assert loss == pytest.approx(14 / 16)  # -(sum s) / (2 rows x 8 tokens)
    assert_close(grad, torch.tensor([[-1 / 16, -1 / 16, -1 / 16, 0.0], [-2 / 16, 0.0, 0.0, 0.0]], dtype=D))
    with pytest.raises(ValueError, match="normaliser"):
        PolicyLoss("none", aggregation="constant")


@pytest.mark.parametrize(
    ("aggregation", "normaliser"), [("token_mean", None), ("sequence_mean", None), ("constant", 8)]
)
def test_micro_batches_weighted_by_their_token_share_sum_to_the_batch(aggregation, normaliser):
    whole, whole_grad = aggregated(aggregation, normaliser)
    spec = PolicyLoss("none", aggregation=aggregation, normaliser=normaliser)
    total, grads = 0.0, []
    for row in (0, 1):  # one row per micro-batch: 3 and 1 of the 4 action tokens
        lp = torch.tensor([LOGP[row]], dtype=D, requires_grad=True)
        mask = torch.tensor([MASK[row]])
        share = float(mask.sum()) / 4
        denominator = micro_batch_denominator(spec, rows=2, tokens=4, piece_tokens=float(mask.sum()))
        loss, _ = policy_gradient_loss(lp, lp.detach(), torch.tensor([ADV[row]], dtype=D), mask, spec, denominator)
        (share * loss).backward()
        total += share * float(loss.detach())
        grads.append(lp.grad[0])
    assert total == pytest.approx(whole)
    assert_close(torch.stack(grads), whole_grad)
    assert micro_batch_denominator(spec, 2, 4, 0.0) in (None, 1.0)  # no action tokens: a sum of 0 over 1


# ----------------------------------------------------------------------------------------------
# value loss and explained variance
# ----------------------------------------------------------------------------------------------
def test_value_loss_plain():
    v = torch.tensor([[1.0, 0.0, 5.0]], dtype=D, requires_grad=True)
    G = t(2.0, 0.5, 0.0)
    mask = torch.tensor([[True, True, False]])
    loss = value_loss(v, G, mask)
    assert_close(loss, torch.tensor(0.5 * (1.0 + 0.25) / 2, dtype=D))
    loss.backward()
    assert_close(v.grad, t((1.0 - 2.0) / 2, (0.0 - 0.5) / 2, 0.0))


def test_value_loss_clipped():
    v = torch.tensor([[1.0, 0.0]], dtype=D, requires_grad=True)
    old = t(0.5, 0.5)
    G = t(2.0, 0.0)
    mask = torch.tensor([[True, True]])
    loss = value_loss(v, G, mask, old_values=old, clip=0.2)
    # tok 0: (1-2)^2 = 1 vs clipped 0.7: (0.7-2)^2 = 1.69 -> 1.69 (clipped branch, no gradient)
    # tok 1: (0-0)^2 = 0 vs clipped 0.3: 0.09 -> 0.09 (clipped branch, no gradient)
    assert_close(loss, torch.tensor(0.5 * (1.69 + 0.09) / 2, dtype=D))
    loss.backward()
    assert_close(v.grad, t(0.0, 0.0))
    with pytest.raises(ValueError):
        value_loss(v, G, mask, clip=0.2)


def test_explained_variance():
    mask = torch.tensor([[True, True, True, False]])
    # residual (0, 0, 1): var 2/9; returns (1, 2, 4): var 14/9 -> EV = 1 - 1/7
    ev = explained_variance(t(1.0, 2.0, 3.0, 99.0), t(1.0, 2.0, 4.0, -99.0), mask)
    assert ev == pytest.approx(6 / 7)
    assert explained_variance(t(1.0, 2.0, 4.0, 0.0), t(1.0, 2.0, 4.0, 0.0), mask) == pytest.approx(1.0)
    assert math.isnan(explained_variance(t(0.0, 1.0, 2.0, 0.0), t(3.0, 3.0, 3.0, 0.0), mask))
    assert math.isnan(explained_variance(t(0.0, 0.0, 0.0, 0.0), t(1.0, 2.0, 3.0, 0.0), torch.zeros_like(mask)))


def test_kl_to_reference_by_hand():
    from trainers.losses import kl_to_reference

    logp = torch.tensor([[-1.0, -2.0, float("-inf")]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    # d = ref - logp = [-0.5, 1.0]; exp(d) - d - 1 = [0.106531, 0.718282]; mean over 2 tokens
    kl = kl_to_reference(logp, ref, mask)
    assert kl.item() == pytest.approx((math.exp(-0.5) + 0.5 - 1 + math.exp(1.0) - 2) / 2, rel=1e-6)
    kl.backward()
    # d kl / d logp_t = (1 - exp(d_t)) / 2: logp below the reference is pushed up, above it down
    assert logp.grad[0, :2].tolist() == pytest.approx([(1 - math.exp(-0.5)) / 2, (1 - math.exp(1.0)) / 2], rel=1e-6)
    assert logp.grad[0, 2].item() == 0.0
    assert kl_to_reference(ref, ref, mask).item() == 0.0
