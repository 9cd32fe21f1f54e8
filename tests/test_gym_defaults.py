"""`gymnasium.make("testbed/StyleShift-v0")` with no arguments: the rubric judge, the headline
schedule in episodes and the training prompts; keyword arguments override each of them."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
from gymnasium.utils.env_checker import check_env

from testbed.envs import STYLE_SHIFT_ENV_ID, Phase, PiecewiseSchedule, StyleShiftEnv
from testbed.world import generate, prompts

ROOT = Path(__file__).resolve().parents[1]


def test_made_with_no_arguments_passes_the_checker():
    env = gymnasium.make(STYLE_SHIFT_ENV_ID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    assert isinstance(env.unwrapped, StyleShiftEnv)


def test_the_defaults_are_the_headline_experiment():
    env = gymnasium.make(STYLE_SHIFT_ENV_ID).unwrapped
    assert type(env.judge).__module__ == "judges.rubric"
    assert env.schedule.switch_points() == [2400, 4200]
    assert [env.schedule.target(t).style for t in (0, 2399, 2400, 4199, 4200, 10_000)] == [
        "cute",
        "cute",
        "chuunibyou",
        "chuunibyou",
        "classical",
        "classical",
    ]
    assert env.schedule.target(4200).candidates == ("classical", "cute", "chuunibyou")
    assert [s.prompt_id for s in env.prompt_specs] == [s.prompt_id for s in prompts("train")]


def test_the_default_judge_scores_on_and_off_target_pieces():
    env = gymnasium.make(STYLE_SHIFT_ENV_ID)
    env.reset(seed=0)
    rng = random.Random(0)
    rewards = {}
    for style in ("cute", "academic"):  # t = 0: the target is cute
        _, info = env.reset()
        rewards[style] = env.step(generate(style, info["topic"], rng))[1]
    assert rewards == {"cute": 1.0, "academic": 0.0}


def test_keyword_arguments_override_the_defaults():
    class Fixed:
        async def judge(self, requests):
            raise AssertionError("not called")

    schedule = PiecewiseSchedule([Phase("classical", 0, 5, ("classical", "cute"))])
    specs = prompts("heldout")[:3]
    env = gymnasium.make(STYLE_SHIFT_ENV_ID, judge=Fixed(), schedule=schedule, prompt_specs=specs, seed=7).unwrapped
    assert isinstance(env.judge, Fixed) and env.schedule is schedule and env.prompt_specs == specs
    obs, info = env.reset()
    assert info["prompt_id"] in {s.prompt_id for s in specs} and "classical" in obs


def test_importing_the_envs_loads_no_judge():
    code = "import sys, testbed.envs; print(sorted(m for m in sys.modules if m.split('.')[0] == 'judges'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
