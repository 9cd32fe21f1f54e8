"""The off-policy corrections beside DIS and PPO clip (trainers/losses.py): TIS, MIS / IcePop and
the sequence mask, each against a case computed by hand, with the share it truncated or masked;
and the settings that choose them (trainers/config.py)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from trainers.grpo import GRPOConfig
from trainers.losses import PolicyLoss, policy_gradient_loss
from trainers.sao_config import SAOConfig

D = torch.float64


def setup(rows: list[list[float]], advs: list[list[float]], pad: int = 1):
    """Behaviour log-probs 0, current log-probs log r (r from `rows`, so exp(log r) is r to the last
    bit for the edges used here), one padding position per row with a junk ratio that must count
    nowhere; rows of equal length."""
    n = len(rows[0])
    behaviour = torch.zeros(len(rows), n + pad, dtype=D)
    ratios = torch.tensor([r + [1.0] * pad for r in rows], dtype=D)
    logprobs = (behaviour + ratios.log()).detach()
    logprobs[:, n:] = 40.0  # a ratio of e^41 at padding
    logprobs.requires_grad_(True)
    A = torch.tensor([a + [9.0] * pad for a in advs], dtype=D)
    mask = torch.zeros(len(rows), n + pad, dtype=torch.bool)
    mask[:, :n] = True
    return logprobs, behaviour, A, mask


def check(loss_fn: PolicyLoss, rows, advs, weights: list[list[float]]):
    """The loss is -(1/N) sum w_t A_t log pi_t over the N action tokens and its gradient -w_t A_t / N:
    `weights` are the hand-computed w_t (constants: no gradient through them)."""
    logprobs, behaviour, A, mask = setup(rows, advs)
    loss, stats = policy_gradient_loss(logprobs, behaviour, A, mask, loss_fn)
    loss.backward()
    n = len(rows[0])
    w = torch.tensor(weights, dtype=D)
    count = w.numel()
    assert_close(loss, -(w * A[:, :n] * logprobs.detach()[:, :n]).sum() / count)
    assert_close(logprobs.grad[:, :n], -w * A[:, :n] / count)
    assert (logprobs.grad[:, n:] == 0).all()  # padding: no gradient
    return stats


def test_tis_truncates_the_ratio_at_its_cap():
    # cap C = 1 + high = 2: r = 0.5, 1, 2 pass; 3 and 8 weigh 2 (2 is the cap itself, not truncated)
    stats = check(
        PolicyLoss("tis", 0.0, 1.0),
        [[0.5, 1.0, 2.0, 3.0, 8.0]],
        [[1.0, -1.0, 2.0, 1.0, -2.0]],
        [[0.5, 1.0, 2.0, 2.0, 2.0]],
    )
    assert stats["tis_truncated_frac"] == pytest.approx(2 / 5)
    assert stats["ratio_mean"] == pytest.approx((0.5 + 1 + 2 + 3 + 8) / 5)


def test_mis_masks_the_tokens_outside_its_closed_band():
    # the band [0.5, 2]: 0.4 and 2.5 weigh 0, the edges 0.5 and 2 keep their ratio (DIS's band is open)
    ratios = [0.4, 0.5, 1.2, 2.0, 2.5]
    assert torch.tensor(ratios, dtype=D).log().exp().tolist()[1::2] == [0.5, 2.0]  # really on the edges
    stats = check(PolicyLoss("mis", 0.5, 1.0), [ratios], [[1.0, 1.0, -1.0, 2.0, -3.0]], [[0.0, 0.5, 1.2, 2.0, 0.0]])
    assert stats["mis_masked_frac"] == pytest.approx(2 / 5)


def test_seq_mask_drops_whole_sequences_by_their_geometric_mean_ratio():
    rows = [
        [1.002, 0.9995],  # one token outside [0.999, 1.001], geometric mean sqrt(1.002 x 0.9995) = 1.00075: kept
        [1.1, 1.0],  # geometric mean sqrt(1.1) = 1.0488: the whole sequence weighs 0
        [0.9, 1.1],  # each token far out, geometric mean sqrt(0.99) = 0.99499: dropped too
    ]
    advs = [[1.0, -2.0], [3.0, 1.0], [1.0, 1.0]]
    band = PolicyLoss("seq_mask", 1 - 0.999, 1.001 - 1)
    stats = check(band, rows, advs, [[1.002, 0.9995], [0.0, 0.0], [0.0, 0.0]])
    assert stats["seq_masked_frac"] == pytest.approx(4 / 6)  # the action tokens of the two dropped sequences


def test_seq_mask_ignores_padding_in_the_geometric_mean():
    """A row of 1 action token and 3 padding positions with a huge ratio: its geometric mean is its
    one token's ratio, so it is kept."""
    logprobs, behaviour, A, mask = setup([[1.0005]], [[1.0]], pad=3)
    _, stats = policy_gradient_loss(logprobs, behaviour, A, mask, PolicyLoss("seq_mask", 0.001, 0.001))
    assert stats["seq_masked_frac"] == 0.0


def test_on_policy_every_correction_is_reinforce():
    """At ratio 1 (the synchronous runtime, no mismatch) TIS, MIS and the sequence mask weigh every
    token 1: the same gradient as plain REINFORCE. This is why they must be compared where the ratio moves."""
    grads = {}
    for name, band in {"none": (0, 0), "tis": (0, 1), "mis": (0.5, 4), "seq_mask": (0.001, 0.001)}.items():
        logprobs, behaviour, A, mask = setup([[1.0, 1.0, 1.0]], [[1.0, -2.0, 0.5]])
        loss, _ = policy_gradient_loss(logprobs, behaviour, A, mask, PolicyLoss(name, *band))
        grads[name] = torch.autograd.grad(loss, logprobs)[0]
    for name in ("tis", "mis", "seq_mask"):
        assert_close(grads[name], grads["none"])


@pytest.mark.parametrize("config", [SAOConfig, GRPOConfig])
def test_the_settings_give_each_correction_its_band(config):
    cfg = config.model_validate({"policy_loss": "tis", "tis_cap": 3.0})
    assert cfg.loss_settings() == PolicyLoss("tis", 0.0, 2.0)
    mis = config.model_validate({"policy_loss": "mis"}).loss_settings()
    assert (mis.correction, 1 - mis.low, 1 + mis.high) == ("mis", 0.5, 5.0)  # IcePop's band, exactly
    seq = config.model_validate({"policy_loss": "seq_mask"}).loss_settings()
    assert (seq.correction, 1 - seq.low, 1 + seq.high) == ("seq_mask", 0.999, 1.001)  # verl's Geo-RS band, exactly
    with pytest.raises(ValueError, match="tis_cap"):
        config.model_validate({"tis_cap": 0.5})
    with pytest.raises(ValueError, match="policy_loss"):
        config.model_validate({"policy_loss": "icepop"})
