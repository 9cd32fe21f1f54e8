"""Per-episode sampling streams (`sampling.streams: episode`, testbed/engines/streams.py): an
episode's response depends on its policy and its stream only, never on the batch it was sampled in,
the rows beside it or the run's generator; the arms of a seed share the streams; the default
(`batch`) still draws from the run's generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from testbed.engines.hf_engine import HFEngine
from testbed.engines.streams import episode_uniforms, request_seed
from testbed.envs.episode import stream_id
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig

PROMPTS = [
    f"Write a short piece about {t}. Styles: cute, classical." for t in ("tea", "rain", "a cat", "trains", "bread")
]


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    tok = WordTokenizer.build()
    cfg = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16)
    return build_policy(cfg, tok), tok


def engine(policy, streams: str, lean: bool = True, max_batch: int = 128) -> HFEngine:
    model, tok = policy
    return HFEngine(model, tok, SamplingConfig(max_new_tokens=12, streams=streams), lean=lean, max_batch=max_batch)


def test_uniforms_are_philox_at_the_streams_counter():
    """Row i is numpy's Philox keyed by the stream, counting from the turn's top counter word."""
    table = episode_uniforms([7, 7, 8], [0, 1, 0], 5)
    assert table.dtype == torch.float64 and table.shape == (3, 5)
    expected = np.random.Generator(np.random.Philox(key=7, counter=[0, 0, 0, 1])).random(5)
    np.testing.assert_array_equal(table[1].numpy(), expected)
    assert not torch.equal(table[0], table[1]) and not torch.equal(table[0], table[2])  # turns and streams differ
    assert torch.equal(episode_uniforms([7], [0], 3)[0], table[0, :3])  # a prefix: the length changes nothing
    assert 0 <= request_seed(7, 0) < 2**31 - 1 and request_seed(7, 0) != request_seed(7, 1)


def test_stream_ids_are_shared_by_arms_and_differ_by_kind_and_clock():
    assert stream_id(3, "train", 10) == stream_id(3, "train", 10)
    ids = {stream_id(3, "train", 10), stream_id(3, "train", 11), stream_id(4, "train", 10), stream_id(3, "eval", 10, 0)}
    assert len(ids) == 4


@pytest.mark.parametrize("lean", [True, False])
def test_an_episode_samples_the_same_tokens_in_any_batch(policy, lean):
    streams = [stream_id(0, "train", t) for t in range(len(PROMPTS))]
    whole = engine(policy, "episode", lean).generate(PROMPTS, streams=streams)
    torch.manual_seed(123)  # the run's generator plays no part
    reordered = engine(policy, "episode", lean, max_batch=2).generate(PROMPTS[::-1], streams=streams[::-1])[::-1]
    alone = engine(policy, "episode", lean).generate(PROMPTS[3:4], streams=streams[3:4])
    for a, b in zip(whole, reordered):
        assert a.response_tokens == b.response_tokens
        np.testing.assert_allclose(a.segments[0].logprobs, b.segments[0].logprobs, atol=1e-5)
    assert alone[0].response_tokens == whole[3].response_tokens


def test_the_batch_mode_still_draws_from_the_runs_generator(policy):
    torch.manual_seed(5)
    first = engine(policy, "batch").generate(PROMPTS, streams=[1, 2, 3, 4, 5])  # streams are ignored
    torch.manual_seed(5)
    again = engine(policy, "batch").generate(PROMPTS)
    assert [t.response_tokens for t in first] == [t.response_tokens for t in again]
    torch.manual_seed(6)
    other = engine(policy, "batch").generate(PROMPTS)
    assert [t.response_tokens for t in other] != [t.response_tokens for t in first]


def test_a_revision_turn_draws_its_streams_next_numbers(policy):
    eng = engine(policy, "episode")
    streams = [stream_id(0, "train", t) for t in range(2)]
    trajs = eng.generate(PROMPTS[:2], streams=streams)
    twin = eng.generate(PROMPTS[:2], streams=streams)
    eng.extend(trajs, ["editor: more cute."] * 2, streams=streams)
    eng.extend(twin[::-1], ["editor: more cute."] * 2, streams=streams[::-1])  # order does not matter
    assert [t.response_tokens for t in trajs] == [t.response_tokens for t in twin]
    assert trajs[0].turns == 2


def test_episode_streams_without_streams_is_an_error_naming_the_setting(policy):
    with pytest.raises(ValueError, match="sampling.streams: episode"):
        engine(policy, "episode").generate(PROMPTS)


def test_the_sft_check_samples_with_episode_streams(policy):
    """The SFT acceptance check (testbed/runtimes/sft_check.py) passes the held-out starts' streams,
    so a scenario with `sampling.streams: episode` can train its SFT policy."""
    from pathlib import Path

    from testbed.runtimes.sft_check import sft_evaluator
    from testbed.scenario.schema import load_scenario

    model, tok = policy
    scenario = load_scenario(
        str(Path(__file__).resolve().parent / "data" / "tiny.yaml"),
        ["sampling.streams=episode", "policy.sft.eval_samples=4", "sampling.max_new_tokens=6"],
    )
    report = sft_evaluator(scenario)(model, tok)
    assert report["samples"] == 4 and 0 <= report["quality"] <= 1
