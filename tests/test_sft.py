"""SFT's loss is transformers' causal-LM loss, and a round stops at the first acceptance check it
passes (checks fall in the round's second half)."""

import torch

from testbed.models.policy import build_policy
from testbed.models.sft import causal_lm_loss, encode_corpus, sft_corpus, train_sft
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig

TOK = WordTokenizer.build()
SMALL = PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, num_experts=2, expert_size=8)


def data(n=16):
    return encode_corpus(sft_corpus(n, ["cute", "academic"], seed=0), TOK)


def test_loss_is_transformers_causal_lm_loss():
    model = build_policy(SMALL, TOK)
    ids, mask, labels = data()
    want = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
    torch.testing.assert_close(causal_lm_loss(model, ids, mask, labels), want, atol=1e-6, rtol=1e-6)


def test_training_stops_at_the_first_passing_check():
    calls = []

    def accept():
        calls.append(len(calls))
        return len(calls) == 2  # the second check passes

    losses = train_sft(
        build_policy(SMALL, TOK), data(), steps=8, batch_size=4, lr=1e-3, seed=0, accept=accept, checks=2
    )
    assert len(calls) == 2 and len(losses) == 6  # checks after steps 4 and 6 of 8


def test_without_a_passing_check_the_round_runs_to_the_end():
    losses = train_sft(
        build_policy(SMALL, TOK), data(), steps=8, batch_size=4, lr=1e-3, seed=0, accept=lambda: False, checks=4
    )
    assert len(losses) == 8


def test_each_step_is_reported_with_its_running_loss():
    seen = []
    losses = train_sft(
        build_policy(SMALL, TOK),
        data(),
        steps=8,
        batch_size=4,
        lr=1e-3,
        seed=0,
        on_step=lambda step, total, **values: seen.append((step, total, values)),
    )
    assert [(step, total) for step, total, _ in seen] == [(s, 8) for s in range(1, 9)]
    assert [values["loss"] for _, _, values in seen] == [
        sum(losses[max(0, s - 20) : s]) / min(s, 20) for s in range(1, 9)
    ]


def test_a_passing_check_ends_the_bar_where_training_stopped():
    seen = []
    train_sft(
        build_policy(SMALL, TOK),
        data(),
        steps=8,
        batch_size=4,
        lr=1e-3,
        seed=0,
        accept=lambda: True,
        checks=2,
        on_step=lambda step, total, **values: seen.append((step, total)),
    )
    assert seen == [(1, 8), (2, 8), (3, 8), (4, 4)]  # the first check, after step 4, passes


TWO_AT_ONCE = """
import sys
import testbed
from testbed.scenario.schema import PolicyConfig, SFTConfig
from testbed.models.sft import load_or_train_policy
cfg = PolicyConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, num_experts=2, expert_size=8,
                   sft=SFTConfig(steps=40, batch_size=8, corpus_size=64))
load_or_train_policy(cfg, ["cute", "academic"], log=lambda m: print(m.split(" (")[0].split(";")[0]))
"""


def test_two_processes_asking_for_the_same_policy_train_it_once(tmp_path):
    """The second waits on the cache's lock and loads what the first trained."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TESTBED_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_AT_ONCE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    said = sorted(p.communicate(timeout=300)[0].strip().splitlines()[0] for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert said[0] == "SFT policy from cache " + str(next(tmp_path.glob("policy-*"))) and said[1].startswith("Training")
    assert len(list(tmp_path.glob("policy-*"))) == 1
