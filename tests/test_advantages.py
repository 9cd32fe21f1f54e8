"""Hand-computed checks for trainers/advantages.py. Layout legend in comments:
P = prompt, a = action token, O = observation token, _ = padding."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from trainers.advantages import (
    SlidingWindowBaseline,
    broadcast_to_tokens,
    critic_mask,
    gae_naive,
    gae_step_level,
    gae_token_level,
    group_advantages,
    length_adaptive_lambda,
    policy_and_critic_advantages,
    response_span,
    turn_index,
)

D = torch.float64
JUNK = 100.0  # values/rewards at non-action positions: must never be read


def row(*xs: float) -> torch.Tensor:
    return torch.tensor([list(xs)], dtype=D)


def mask_of(layout: str) -> torch.Tensor:
    return torch.tensor([[c == "a" for c in layout]])


# ----------------------------------------------------------------------------------------------
# token-level GAE
# ----------------------------------------------------------------------------------------------
def test_gae_single_turn_hand_computed():
    # P P a a a _ ; gamma 0.9, lam 0.8 -> gamma*lam = 0.72
    mask = mask_of("PPaaa_")
    rewards = row(JUNK, JUNK, 0.0, 0.0, 1.0, JUNK)
    values = row(JUNK, JUNK, 0.5, 0.6, 0.7, JUNK)
    adv, ret = gae_token_level(rewards, values, mask, gamma=0.9, lam=0.8)
    # t2: delta = 1 - 0.7 = 0.3                 A = 0.3
    # t1: delta = 0.9*0.7 - 0.6 = 0.03          A = 0.03 + 0.72*0.3   = 0.246
    # t0: delta = 0.9*0.6 - 0.5 = 0.04          A = 0.04 + 0.72*0.246 = 0.21712
    assert_close(adv, row(0, 0, 0.21712, 0.246, 0.3, 0))
    assert_close(ret, row(0, 0, 0.71712, 0.846, 1.0, 0))


def test_gae_multi_turn_observation_skipping_hand_computed():
    # P P a a O O O a O a a _ : observation spans of length 3 and 1; gamma 0.9, lam 0.5 (gl 0.45)
    layout = "PPaaOOOaOaa_"
    mask = mask_of(layout)
    rewards = row(JUNK, JUNK, 0, 0, JUNK, JUNK, JUNK, 0, JUNK, 0, 1.0, JUNK)
    values = row(JUNK, JUNK, 0.2, 0.4, JUNK, JUNK, JUNK, 0.5, JUNK, 0.6, 0.8, JUNK)
    adv, ret = gae_token_level(rewards, values, mask, gamma=0.9, lam=0.5)
    # a4: 1 - 0.8 = 0.2                                    A = 0.2
    # a3: 0.9*0.8 - 0.6 = 0.12                             A = 0.12 + 0.45*0.2    = 0.21
    # a2 -> crosses O (len 1): 0.9*0.6 - 0.5 = 0.04        A = 0.04 + 0.45*0.21   = 0.1345
    # a1 -> crosses O O O (len 3): 0.9*0.5 - 0.4 = 0.05    A = 0.05 + 0.45*0.1345 = 0.110525
    # a0: 0.9*0.4 - 0.2 = 0.16                             A = 0.16 + 0.45*0.110525 = 0.20973625
    expected = row(0, 0, 0.20973625, 0.110525, 0, 0, 0, 0.1345, 0, 0.21, 0.2, 0)
    assert_close(adv, expected)
    assert_close(ret, torch.where(mask, expected + values, torch.zeros_like(values)))
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()

    # Same actions with the observations removed (or of any other length): same advantages,
    # i.e. an observation costs exactly one gamma*lam step however long it is.
    for other in ("PPaaaaa", "PPaaOaOOOOOaa"):
        m2 = mask_of(other)
        v2 = torch.full(m2.shape, JUNK, dtype=D)
        r2 = torch.full(m2.shape, JUNK, dtype=D)
        v2[m2] = values[mask]
        r2[m2] = rewards[mask]
        adv2, _ = gae_token_level(r2, v2, m2, gamma=0.9, lam=0.5)
        assert_close(adv2[m2], adv[mask])


def test_naive_gae_runs_through_observations_hand_computed():
    # P a a O O a _ ; gamma 0.9, lam 0.5 (gl 0.45). Values at O are read, rewards at O are not.
    mask = mask_of("PaaOOa_")
    rewards = row(JUNK, 0, 0, JUNK, JUNK, 1.0, JUNK)
    values = row(JUNK, 0.2, 0.4, 0.1, 0.3, 0.8, JUNK)
    adv, ret = gae_naive(rewards, values, mask, gamma=0.9, lam=0.5)
    # p5 (a): 1 - 0.8 = 0.2                       A = 0.2
    # p4 (O): 0.9*0.8 - 0.3 = 0.42                A = 0.42 + 0.45*0.2     = 0.51
    # p3 (O): 0.9*0.3 - 0.1 = 0.17                A = 0.17 + 0.45*0.51    = 0.3995
    # p2 (a): 0.9*0.1 - 0.4 = -0.31               A = -0.31 + 0.45*0.3995 = -0.130225
    # p1 (a): 0.9*0.4 - 0.2 = 0.16                A = 0.16 + 0.45*-0.130225 = 0.10139875
    assert_close(adv, row(0, 0.10139875, -0.130225, 0, 0, 0.2, 0))  # no advantage on observations
    assert_close(ret, row(0, 0.30139875, 0.269775, 0.4995, 0.81, 1.0, 0))  # critic targets on the span
    # Observation-skipping on the same row: a2 bootstraps from V(a5) directly.
    tok, _ = gae_token_level(rewards, values, mask, gamma=0.9, lam=0.5)
    assert_close(tok, row(0, 0.3445, 0.41, 0, 0, 0.2, 0))


def test_naive_gae_differs_exactly_where_an_observation_is_crossed():
    # Row 0 has two observation spans; row 1 has none. Random values and a final reward.
    torch.manual_seed(0)
    layouts = ["PPaaaOOaaOOOaa_", "PPPaaaaaa______"]
    mask = torch.cat([mask_of(x) for x in layouts])
    values = torch.rand(mask.shape, dtype=D)
    rewards = torch.zeros(mask.shape, dtype=D)
    rewards[0, 13], rewards[1, 8] = 1.0, 1.0
    naive, naive_ret = gae_naive(rewards, values, mask, gamma=1.0, lam=0.95)
    token, _ = gae_token_level(rewards, values, mask, gamma=1.0, lam=0.95)
    assert_close(naive[1], token[1])  # no observation crossed: the same numbers
    assert_close(naive[0, 12:], token[0, 12:])  # after the last observation: the same
    before = [2, 3, 4, 7, 8]  # actions whose future crosses an observation
    assert ((naive[0, before] - token[0, before]).abs() > 1e-6).all()
    assert (naive[~mask] == 0).all()
    assert (naive_ret[0, 5:7] != 0).all() and (naive_ret[0, :2] == 0).all()  # targets on O, not on P


def test_response_span_and_critic_mask():
    mask = torch.cat([mask_of("PPaaOOa__"), mask_of("PaaaaaaaP")])
    assert response_span(mask).tolist() == [
        [c != "P" and c != "_" for c in "PPaaOOa__"],
        [c == "a" for c in "PaaaaaaaP"],
    ]
    assert critic_mask(mask, "naive").tolist() == response_span(mask).tolist()
    for mode in ("token", "step_average", "step_last"):
        assert critic_mask(mask, mode).tolist() == mask.tolist()


def test_gae_gamma_lambda_one_gives_R_minus_V():
    layout = "PaaaOOaOOOOaa__"
    mask = mask_of(layout)
    torch.manual_seed(0)
    values = torch.randn(mask.shape, dtype=D)
    rewards = torch.zeros(mask.shape, dtype=D)
    last = mask[0].nonzero().max()
    R = 0.75
    rewards[0, last] = R
    adv, ret = gae_token_level(rewards, values, mask, gamma=1.0, lam=1.0)
    assert_close(adv[mask], R - values[mask])
    assert_close(ret[mask], torch.full_like(ret[mask], R))
    assert (adv[~mask] == 0).all()


def _random_batch(layouts: list[str], seed: int = 0):
    torch.manual_seed(seed)
    T = max(len(s) for s in layouts)
    padded = [s + "_" * (T - len(s)) for s in layouts]
    mask = torch.tensor([[c == "a" for c in s] for s in padded])
    values = torch.randn(len(layouts), T, dtype=D)
    rewards = torch.randn(len(layouts), T, dtype=D)  # rewards on every action token, junk elsewhere
    return mask, rewards, values


LAYOUTS = ["PPaaOOOa", "Paaaaaa", "PPPPaOaOaOaa", "PPPa", "PP"]  # last row: no action token at all


@pytest.mark.parametrize("fn", ["token", "step_average", "step_last"])
def test_padded_batch_matches_row_by_row(fn):
    mask, rewards, values = _random_batch(LAYOUTS)
    lam = torch.tensor([0.3, 0.9, 0.5, 1.0, 0.7], dtype=D)

    def call(r, v, m, lam_):
        if fn == "token":
            return gae_token_level(r, v, m, 0.95, lam_)
        return gae_step_level(r, v, m, 0.95, lam_, mode="average" if fn == "step_average" else "last")

    adv, ret = call(rewards, values, mask, lam)
    for b, layout in enumerate(LAYOUTS):
        n = len(layout)  # each row alone, without the batch's padding
        a1, r1 = call(rewards[b : b + 1, :n], values[b : b + 1, :n], mask[b : b + 1, :n], float(lam[b]))
        assert_close(adv[b, :n], a1[0])
        assert_close(ret[b, :n], r1[0])
        assert (adv[b, n:] == 0).all() and (ret[b, n:] == 0).all()
    assert (adv[4] == 0).all()


def test_per_trajectory_lambda_tensor():
    # two copies of the single-turn row; lam tensor [0.8, 1.0] == two scalar calls
    mask = mask_of("PPaaa_").repeat(2, 1)
    rewards = row(0, 0, 0, 0, 1.0, 0).repeat(2, 1)
    values = row(0, 0, 0.5, 0.6, 0.7, 0).repeat(2, 1)
    adv, _ = gae_token_level(rewards, values, mask, 0.9, torch.tensor([0.8, 1.0]))
    assert_close(adv[0], row(0, 0, 0.21712, 0.246, 0.3, 0)[0])
    # lam = 1: t2 0.3; t1 0.03 + 0.9*0.3 = 0.3; t0 0.04 + 0.9*0.3 = 0.31
    assert_close(adv[1], row(0, 0, 0.31, 0.3, 0.3, 0)[0])
    with pytest.raises(ValueError):
        gae_token_level(rewards, values, mask, 0.9, torch.tensor([0.8, 1.0, 1.0]))


# ----------------------------------------------------------------------------------------------
# step-level GAE
# ----------------------------------------------------------------------------------------------
# P a a O a a a _ : turn 1 = values (0.2, 0.4), reward 0.1 on its 2nd token;
#                   turn 2 = values (0.3, 0.6, 0.9), final reward 1.0. gamma 0.9, lam 0.5.
STEP_MASK = mask_of("PaaOaaa_")
STEP_REWARDS = row(JUNK, 0.0, 0.1, JUNK, 0.0, 0.0, 1.0, JUNK)
STEP_VALUES = row(JUNK, 0.2, 0.4, JUNK, 0.3, 0.6, 0.9, JUNK)


def test_turn_index():
    idx, n = turn_index(mask_of("PaaOaaa_"))
    assert idx.tolist() == [[-1, 0, 0, -1, 1, 1, 1, -1]]
    assert n.tolist() == [2]


def test_gae_step_average_hand_computed():
    adv, ret = gae_step_level(STEP_REWARDS, STEP_VALUES, STEP_MASK, 0.9, 0.5, mode="average")
    # V1 = 0.3, V2 = 0.6; R1 = 0.1, R2 = 1.0
    # turn 2: delta = 1 - 0.6 = 0.4                 A2 = 0.4
    # turn 1: delta = 0.1 + 0.9*0.6 - 0.3 = 0.34    A1 = 0.34 + 0.45*0.4 = 0.52
    assert_close(adv, row(0, 0.52, 0.52, 0, 0.4, 0.4, 0.4, 0))
    assert_close(ret, row(0, 0.82, 0.82, 0, 1.0, 1.0, 1.0, 0))


def test_gae_step_last_hand_computed():
    adv, ret = gae_step_level(STEP_REWARDS, STEP_VALUES, STEP_MASK, 0.9, 0.5, mode="last")
    # V1 = 0.4, V2 = 0.9
    # turn 2: delta = 1 - 0.9 = 0.1                 A2 = 0.1
    # turn 1: delta = 0.1 + 0.9*0.9 - 0.4 = 0.51    A1 = 0.51 + 0.45*0.1 = 0.555
    assert_close(adv, row(0, 0.555, 0.555, 0, 0.1, 0.1, 0.1, 0))
    assert_close(ret, row(0, 0.955, 0.955, 0, 1.0, 1.0, 1.0, 0))


def test_step_level_bad_mode():
    with pytest.raises(ValueError):
        gae_step_level(STEP_REWARDS, STEP_VALUES, STEP_MASK, 0.9, 0.5, mode="mean")


# ----------------------------------------------------------------------------------------------
# lambda helpers
# ----------------------------------------------------------------------------------------------
def test_length_adaptive_lambda():
    lam = length_adaptive_lambda(torch.tensor([1, 2, 10, 0]), alpha=1.5)
    assert_close(lam, torch.tensor([1 / 3, 2 / 3, 1 - 1 / 15, 0.0]))
    # VAPO's alpha = 0.05: l = 10 gives 1 - 2 = -1, clamped to 0; l = 100 gives 0.8
    assert_close(length_adaptive_lambda([10, 100], alpha=0.05), torch.tensor([0.0, 0.8]))


@pytest.mark.parametrize("mode", ["token", "step_average", "step_last"])
def test_decoupled_lambda_critic_gets_mc_returns(mode):
    # gamma = 1, lam_critic = 1: every action token's return is the final reward R
    mask = mask_of("PPaaOOOaOaa_")
    torch.manual_seed(1)
    values = torch.randn(mask.shape, dtype=D)
    rewards = torch.zeros(mask.shape, dtype=D)
    rewards[0, 10] = 0.6
    lam_pol = length_adaptive_lambda(mask.sum(1), alpha=1.5)
    adv, ret = policy_and_critic_advantages(rewards, values, mask, 1.0, lam_pol, 1.0, mode=mode)
    assert_close(ret[mask], torch.full((int(mask.sum()),), 0.6, dtype=D))
    assert (ret[~mask] == 0).all()
    # the policy side is the plain estimator at lam_policy
    if mode == "token":
        expected, _ = gae_token_level(rewards, values, mask, 1.0, lam_pol)
    else:
        expected, _ = gae_step_level(rewards, values, mask, 1.0, lam_pol, mode=mode.removeprefix("step_"))
    assert_close(adv, expected)
    # lam_pol = 1 - 1/(1.5*5) < 1, so the two sides really differ
    assert not torch.allclose(adv + values * mask, ret)


# ----------------------------------------------------------------------------------------------
# group baselines
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_group_of_one_is_zero(kind):
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5]), torch.tensor([0, 1, 2]), kind=kind)
    assert_close(adv, torch.zeros(3))


def test_grpo_hand_computed():
    # group 7: (1, 0, 0), group 3: (1, 0), group 5: (1, 1) -- interleaved
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], dtype=D)
    ids = torch.tensor([7, 3, 7, 3, 7, 5, 5])
    eps = 1e-6
    # group 7: mean 1/3, sample std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    s7 = (1 / 3) ** 0.5
    # group 3: mean 1/2, sample std sqrt(0.5)
    s3 = 0.5**0.5
    expected = torch.tensor(
        [(2 / 3) / (s7 + eps), 0.5 / (s3 + eps), (-1 / 3) / (s7 + eps), -0.5 / (s3 + eps), (-1 / 3) / (s7 + eps), 0, 0],
        dtype=D,
    )
    assert_close(group_advantages(rewards, ids, "grpo", eps=eps), expected)


def test_rloo_hand_computed():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    ids = [7, 3, 7, 3, 7, 5, 5]
    # group 7: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5 (twice). group 3: 1, -1. group 5: 0, 0
    expected = torch.tensor([1.0, 1.0, -0.5, -1.0, -0.5, 0.0, 0.0])
    assert_close(group_advantages(rewards, ids, "rloo"), expected)


# ----------------------------------------------------------------------------------------------
# sliding-window baseline
# ----------------------------------------------------------------------------------------------
def test_sliding_window_global_size_3():
    base = SlidingWindowBaseline(size=3)
    # window after each push: [1] [1,0] [1,0,1] | [0,1,1] [1,1,0]
    assert base.advantages([1.0, 0.0, 1.0]) == pytest.approx([0.0, -0.5, 1 / 3])
    assert base.advantages([1.0, 0.0]) == pytest.approx([1 / 3, -2 / 3])
    assert base.mean() == pytest.approx(2 / 3)


def test_sliding_window_global_vs_per_prompt():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    ids = ["a", "b", "a", "b", "a"]
    # global, size 2: [1] [1,0] [0,0] [0,1] [1,1]
    glob = SlidingWindowBaseline(size=2)
    assert glob.advantages(rewards, ids) == pytest.approx([0.0, -0.5, 0.0, 0.5, 0.0])
    # per prompt, size 2: a:[1] b:[0] a:[1,0] b:[0,1] a:[0,1]
    per = SlidingWindowBaseline(size=2, per_prompt=True)
    assert per.advantages(rewards, ids) == pytest.approx([0.0, 0.0, -0.5, 0.5, 0.5])
    with pytest.raises(ValueError):
        per.advantages([1.0])


@pytest.mark.parametrize("per_prompt", [False, True])
def test_sliding_window_state_dict_round_trip(per_prompt):
    base = SlidingWindowBaseline(size=3, per_prompt=per_prompt)
    base.advantages([1.0, 0.0, 1.0, 1.0], ["a", "b", "a", "a"])
    restored = SlidingWindowBaseline()
    restored.load_state_dict(base.state_dict())
    nxt, ids = [0.0, 1.0, 0.0], ["a", "b", "b"]
    assert restored.advantages(nxt, ids) == pytest.approx(base.advantages(nxt, ids))
    assert restored.state_dict() == base.state_dict()


def test_broadcast_to_tokens():
    mask = torch.tensor([[False, True, True, False], [True, False, True, True]])
    out = broadcast_to_tokens(torch.tensor([0.5, -1.0]), mask)
    assert_close(out, torch.tensor([[0.0, 0.5, 0.5, 0.0], [-1.0, 0.0, -1.0, -1.0]]))
