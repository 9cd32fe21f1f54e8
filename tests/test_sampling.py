"""The engine's sampler draws exactly from softmax(logp): frequencies match the probabilities and a
token of probability 0 is never drawn."""

import math

import torch

from testbed.engines.hf_engine import sample_categorical


def test_frequencies_match_the_distribution():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.2, 0.15, 0.1, 0.05])
    logp = probs.log().expand(4000, -1)  # log 0 = -inf: that token must never come up
    counts = torch.zeros(len(probs))
    for _ in range(50):
        counts += torch.bincount(sample_categorical(logp)[:, 0], minlength=len(probs)).float()
    n = counts.sum()
    assert counts[1] == 0
    for p, c in zip(probs.tolist(), counts.tolist()):
        sigma = math.sqrt(n * p * (1 - p)) + 1e-9
        assert abs(c - n * p) < 5 * sigma, (p, c / n)


def test_rows_are_independent_distributions():
    torch.manual_seed(1)
    logp = torch.full((3, 4), -1e4)
    logp[0, 2] = logp[1, 0] = logp[2, 3] = 0.0  # each row all but certain of one token
    assert sample_categorical(logp.log_softmax(-1))[:, 0].tolist() == [2, 0, 3]


def test_nan_rows_give_an_index_in_range():
    """The engine reports NaN logits by the sampled log-prob; the sampler itself must not crash."""
    logp = torch.full((2, 5), float("nan"))
    assert sample_categorical(logp).max() < 5


def test_engine_says_so_when_the_policy_gives_nan_logits():
    import pytest

    from testbed.engines.hf_engine import HFEngine
    from testbed.models.policy import build_policy
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import PolicyConfig, SamplingConfig

    tok = WordTokenizer.build()
    model = build_policy(
        PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, num_experts=2, expert_size=8), tok
    )
    with torch.no_grad():
        model.lm_head.weight[7, 0] = float("nan")
    for lean in (True, False):
        with pytest.raises(FloatingPointError, match=r"gives NaN/inf logits at decoding step 0"):
            HFEngine(model, tok, SamplingConfig(max_new_tokens=4), lean=lean).generate(["a prompt"])
