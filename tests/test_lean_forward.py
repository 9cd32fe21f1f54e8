"""The lean training forward computes what transformers' Qwen3-MoE forward computes on the real
(non-padding) positions of a right-padded batch, with the same gradients."""

import pytest
import torch

from testbed.models import lean_forward
from testbed.models.critic import Critic
from testbed.models.policy import build_policy, hidden_states
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig


@pytest.fixture(scope="module")
def model_and_batch():
    tok = WordTokenizer.build()
    model = build_policy(
        PolicyConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, expert_size=16), tok
    )
    with torch.no_grad():  # larger weights than the init, so that routing and attention are far from uniform
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    torch.manual_seed(0)
    tokens = torch.randint(5, tok.vocab_size, (5, 9))
    mask = torch.ones_like(tokens)
    for row, length in enumerate([9, 4, 7, 1, 6]):  # right padding of different lengths
        mask[row, length:] = 0
        tokens[row, length:] = tok.pad_id
    return model, tokens, mask


def transformers_forward(backbone, tokens, mask):
    out = backbone(input_ids=tokens, attention_mask=mask, use_cache=False, output_router_logits=True)
    return out.last_hidden_state, out.router_logits


def test_hidden_states_and_router_logits_match_transformers(model_and_batch):
    model, tokens, mask = model_and_batch
    real = mask.bool()
    with torch.no_grad():
        want_h, want_r = transformers_forward(model.model, tokens, mask)
        got_h, got_r = lean_forward.backbone_forward(model.model, tokens, mask, routing=True)
    torch.testing.assert_close(got_h[real], want_h[real], atol=1e-5, rtol=1e-5)
    assert len(got_r) == len(want_r) == model.config.num_hidden_layers
    for got, want in zip(got_r, want_r):
        torch.testing.assert_close(got[real.reshape(-1)], want[real.reshape(-1)], atol=1e-5, rtol=1e-5)


def test_gradients_match_transformers(model_and_batch):
    model, tokens, mask = model_and_batch
    real = mask.bool()
    weights = torch.randn(*tokens.shape, model.config.hidden_size, generator=torch.Generator().manual_seed(1))

    def grads(forward):
        model.zero_grad(set_to_none=True)
        hidden = forward(model.model, tokens, mask)[0]
        (hidden[real] * weights[real]).sum().backward()
        return {n: p.grad.clone() for n, p in model.model.named_parameters() if p.grad is not None}

    want, got = grads(transformers_forward), grads(lean_forward.backbone_forward)
    assert want.keys() == got.keys() and len(want) > 10
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)
    model.zero_grad(set_to_none=True)


def test_the_critic_and_the_policy_take_the_lean_path_and_others_fall_back(model_and_batch):
    model, tokens, mask = model_and_batch
    assert lean_forward.supports(model.model)
    critic = Critic.from_policy(model)
    assert lean_forward.supports(critic.backbone)
    # A model of another shape (attention biases) is not the lean forward's: the backbone's own forward runs.
    other = build_policy(
        PolicyConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, num_experts=4, expert_size=16),
        WordTokenizer.build(),
    )
    other.config.attention_bias = True
    assert not lean_forward.supports(other.model)
    with torch.no_grad():
        got, _ = hidden_states(other.model, tokens, mask)
        want, _ = transformers_forward(other.model, tokens, mask)
    torch.testing.assert_close(got, want)
