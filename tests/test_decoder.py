"""The lean decoding forward computes what transformers' Qwen3-MoE forward computes, over the
same (live) parameters: prefill of left-padded prompts, then one token per step."""

import pytest
import torch
from transformers import DynamicCache

from testbed.models.decoder import LeanDecoder
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig


@pytest.fixture(scope="module")
def model_and_tok():
    tok = WordTokenizer.build()
    model = build_policy(
        PolicyConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, expert_size=16), tok
    )
    with torch.no_grad():  # larger weights than the init, so that routing and attention are far from uniform
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval(), tok


def hf_steps(model, ids, att, feed):
    positions = (att.cumsum(1) - 1).clamp(min=0)
    cache = DynamicCache()
    with torch.no_grad():
        out = [
            model(input_ids=ids, attention_mask=att, position_ids=positions, cache=cache, use_cache=True).logits[:, -1]
        ]
        nxt = positions[:, -1:] + 1
        for tokens in feed:
            att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
            out.append(
                model(
                    input_ids=tokens[:, None], attention_mask=att, position_ids=nxt, cache=cache, use_cache=True
                ).logits[:, -1]
            )
            nxt = nxt + 1
    return out


def test_lean_logits_match_transformers_with_left_padding(model_and_tok):
    model, tok = model_and_tok
    torch.manual_seed(0)
    ids = torch.randint(5, tok.vocab_size, (4, 7))
    att = torch.ones_like(ids)
    att[0, :3] = 0
    att[2, :1] = 0
    ids[att == 0] = tok.pad_id
    feed = [torch.randint(5, tok.vocab_size, (4,)) for _ in range(6)]
    want = hf_steps(model, ids, att, feed)
    lean = LeanDecoder(model)
    got = [lean.start(ids, att, len(feed))] + [lean.step(t) for t in feed]
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-5)


def test_lean_decoder_reads_the_live_parameters(model_and_tok):
    """A trainer updates the shared module between batches: the next batch must see it."""
    model, tok = model_and_tok
    ids, att = torch.randint(5, tok.vocab_size, (2, 5)), torch.ones(2, 5, dtype=torch.long)
    lean = LeanDecoder(model)
    before = lean.start(ids, att, 1)
    with torch.no_grad():
        model.model.layers[0].mlp.experts.down_proj.mul_(2.0)
        after = lean.start(ids, att, 1)
        torch.testing.assert_close(after, hf_steps(model, ids, att, [])[0], atol=2e-5, rtol=1e-5)
        model.model.layers[0].mlp.experts.down_proj.mul_(0.5)
    assert not torch.allclose(before, after)


def test_other_shapes_fall_back_to_transformers(model_and_tok):
    model, _ = model_and_tok
    assert LeanDecoder.supports(model)
    assert not LeanDecoder.supports(torch.nn.Linear(2, 2))


def test_engine_samples_the_same_with_either_forward(model_and_tok):
    """Same seed, same prompts: the lean and the transformers path draw the same tokens (their
    logits agree to rounding) and record the same behaviour log-probs."""
    from testbed.engines.hf_engine import HFEngine
    from testbed.scenario.schema import SamplingConfig
    from testbed.world import prompts, render_prompt

    model, tok = model_and_tok
    texts = [render_prompt(spec, ["cute", "academic"]) for spec in prompts("train")[:5]]
    runs = []
    for lean in (True, False):
        torch.manual_seed(3)
        runs.append(HFEngine(model, tok, SamplingConfig(max_new_tokens=10), lean=lean).generate(texts, n=2))
    for a, b in zip(*runs):
        assert a.response_tokens == b.response_tokens
        torch.testing.assert_close(
            torch.tensor(a.segments[0].logprobs), torch.tensor(b.segments[0].logprobs), atol=2e-5, rtol=1e-5
        )


def test_dropping_finished_rows_changes_no_row(monkeypatch):
    """Rows that reached <eos> leave the lean decoder's batch; every row still draws the tokens it
    draws when all rows run to the end (the same uniforms, its own computation)."""
    from testbed.engines import hf_engine
    from testbed.models import sft
    from testbed.scenario.schema import SamplingConfig
    from testbed.world import prompts, render_prompt

    tok = WordTokenizer.build()
    model = build_policy(
        PolicyConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, num_experts=4, expert_size=16), tok
    )
    # A few SFT steps: the policy learns to end its pieces, at lengths that differ from row to row.
    sft.train_sft(model, sft.encode_corpus(sft.sft_corpus(400, ["cute", "academic"], 0), tok), 40, 32, 1e-2, 0)
    texts = [render_prompt(spec, ["cute", "academic"]) for spec in prompts("train")[:16]]
    runs = []
    for share in (0, 10**6):  # never drop / drop as soon as one row is done
        monkeypatch.setattr(hf_engine, "COMPACT_SHARE", share)
        torch.manual_seed(5)
        runs.append(hf_engine.HFEngine(model, tok, SamplingConfig(max_new_tokens=48)).generate(texts))
    lengths = {len(t.response_tokens) for t in runs[0]}
    assert len(lengths) >= 5, lengths  # the batch really shrank at several steps
    for a, b in zip(*runs):
        assert a.response_tokens == b.response_tokens
        torch.testing.assert_close(
            torch.tensor(a.segments[0].logprobs), torch.tensor(b.segments[0].logprobs), atol=2e-5, rtol=1e-5
        )
