"""The arm-independent reference per phase (testbed/runtimes/reference_policy.py): the starting policy,
told the target, on the held-out prompts."""

import torch

from judges.rubric import RubricJudge
from testbed.engines.hf_engine import HFEngine
from testbed.envs import Phase, PiecewiseSchedule, StyleShiftEnv
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.runtimes.reference_policy import phase_clocks, reference_rows
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.world import prompts

TOK = WordTokenizer.build()
C12 = ("academic", "cute", "chuunibyou")
C3 = ("classical", "cute", "chuunibyou")


def env() -> StyleShiftEnv:
    schedule = PiecewiseSchedule([Phase("cute", 0, 40, C12), Phase("classical", 40, 100, C3)])
    return StyleShiftEnv(RubricJudge(), schedule, prompts("train"), seed=0)


def test_phase_clocks():
    assert phase_clocks([40, 70], 100) == [(0, 40), (40, 70), (70, 100)]
    assert phase_clocks([], 10) == [(0, 10)]


def test_told_target_prompts_offer_only_the_target_and_keep_the_clock():
    e = env()
    starts = e.told_target_starts(prompts("heldout")[:3], 50)
    assert all(s.target.style == "classical" and s.target.candidates == ("classical",) for s in starts)
    assert all(s.prompt_text.endswith("styles: classical.") for s in starts), starts[0].prompt_text
    assert e.clock == 0


def test_reference_rows_per_phase_without_touching_the_training_random_stream():
    policy = build_policy(
        PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16),
        TOK,
        seed=0,
    )
    engine = HFEngine(policy, TOK, SamplingConfig(max_new_tokens=8))
    e, heldout = env(), prompts("heldout")[:5]
    torch.manual_seed(123)
    state = torch.get_rng_state()
    rows = reference_rows(e, engine, heldout, [40], 100, samples=2, seed=3)
    assert torch.equal(torch.get_rng_state(), state)  # the training rows cannot depend on it
    assert [(r["phase"], r["start"], r["end"], r["target_style"]) for r in rows] == [
        (0, 0, 40, "cute"),
        (1, 40, 100, "classical"),
    ]
    assert all(r["samples"] == 10 and r["candidates"] == r["target_style"] for r in rows)
    assert all(0.0 <= r["reward"] <= r["quality"] <= 1.0 for r in rows)
    again = reference_rows(env(), engine, heldout, [40], 100, samples=2, seed=3)
    assert again == rows  # seeded: the same for every arm of a seed
    assert e.clock == 0
