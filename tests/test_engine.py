"""The rollout engine's behaviour log-probs must be the policy's own log-probs of the sampled
tokens, as a fresh forward pass computes them (DIS and the IS ratios rest on this)."""

import torch

from testbed.engines.hf_engine import HFEngine
from testbed.models.policy import build_policy, token_logprobs
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.world import prompts, render_prompt


def small_engine(temperature=1.0, max_new_tokens=12):
    tok = WordTokenizer.build()
    model = build_policy(
        PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16),
        tok,
        seed=0,
    )
    model.eval()
    return HFEngine(model, tok, SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens)), tok, model


def prompt_texts(n):
    specs = prompts("train")
    # prompts of different lengths, so the batch is left-padded
    return [render_prompt(specs[i * 7], ["cute", "academic", "classical"][: 1 + i % 3]) for i in range(n)]


def fresh_logprobs(model, traj, temperature):
    tokens, mask, _ = traj.token_layout()
    lp, _ = token_logprobs(model, tokens[None], torch.ones_like(tokens)[None], temperature)
    return lp[0][mask]


def test_behaviour_logprobs_match_a_fresh_forward_pass():
    torch.manual_seed(0)
    engine, tok, model = small_engine()
    texts = prompt_texts(6)
    assert len({len(tok.prompt_ids(t)) for t in texts}) > 1  # padding really happens
    trajs = engine.generate(texts)
    assert len(trajs) == 6
    for traj in trajs:
        _, mask, behaviour = traj.token_layout()
        expected = fresh_logprobs(model, traj, 1.0)
        torch.testing.assert_close(behaviour[mask], expected, atol=2e-4, rtol=1e-4)
        assert (behaviour[mask] < 0).all()


def test_logprobs_follow_the_temperature():
    torch.manual_seed(1)
    engine, _, model = small_engine(temperature=0.7)
    for traj in engine.generate(prompt_texts(3)):
        _, mask, behaviour = traj.token_layout()
        torch.testing.assert_close(behaviour[mask], fresh_logprobs(model, traj, 0.7), atol=2e-4, rtol=1e-4)
        assert not torch.allclose(behaviour[mask], fresh_logprobs(model, traj, 1.0), atol=1e-3)


def test_trajectories_stop_at_eos_and_decode():
    torch.manual_seed(2)
    engine, tok, _ = small_engine(max_new_tokens=40)
    trajs = engine.generate(prompt_texts(4), n=3)
    assert len(trajs) == 12
    assert [t.prompt_text for t in trajs[:3]] == [prompt_texts(4)[0]] * 3
    for traj in trajs:
        toks = traj.response_tokens
        assert 1 <= len(toks) <= 40
        assert tok.eos_id not in toks[:-1]  # nothing is kept after the first <eos>
        assert traj.response_text == tok.decode(toks)


def test_tokenizer_round_trips_world_text():
    import random

    from testbed.world import generate, join_words, split_words

    tok = WordTokenizer.build()
    rng = random.Random(0)
    for style in ("cute", "chuunibyou", "classical", "academic", "plain"):
        text = generate(style, "coffee" if False else prompts("train")[0].topic, rng)
        ids = tok.encode(text)
        assert tok.unk_id not in ids
        assert tok.hf.encode(text).tokens == split_words(text)  # the saved tokenizer alone agrees
        assert tok.decode(ids) == join_words(split_words(text)) == text
