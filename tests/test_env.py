"""StyleShiftEnv with the real world prompts and the real rubric judge: the Gymnasium contract,
rewards for on- and off-target pieces, the drift clock, the one-call batched path, evaluation
that leaves the clock alone, and judge failures."""

from __future__ import annotations

import asyncio
import random
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from judges.rubric import RubricJudge
from testbed.envs import STYLE_SHIFT_ENV_ID, EpisodeStart, Phase, PiecewiseSchedule, StyleShiftEnv
from testbed.types import JudgeRequest, Target, Verdict
from testbed.world import generate, prompts

C12 = ("academic", "cute", "chuunibyou")
C3 = ("classical", "cute", "chuunibyou")


def paper_schedule(a: int = 4, b: int = 8) -> PiecewiseSchedule:
    """The paper's sequence cute -> chuunibyou -> classical, with short phases."""
    return PiecewiseSchedule(
        [Phase("cute", 0, a, C12), Phase("chuunibyou", a, b, C12), Phase("classical", b, b + 10, C3)]
    )


class CountingJudge(RubricJudge):
    """The real rubric judge, recording each call's requests."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls: list[list[JudgeRequest]] = []

    async def judge(self, requests):
        self.calls.append(list(requests))
        return await super().judge(requests)


class FlakyJudge:
    """A judge that fails on purpose: every request whose index in the call is in `fail_at`
    (all of them by default) gets an error verdict; the others are scored by the rubric."""

    def __init__(self, fail_at=None):
        self.rubric = RubricJudge()
        self.fail_at = fail_at

    async def judge(self, requests):
        out = []
        for i, req in enumerate(requests):
            if self.fail_at is None or i in self.fail_at:
                out.append(Verdict.failed("judge unavailable (test)"))
            else:
                out.append(self.rubric.score(req))
        return out


class ShortJudge:
    """A broken judge: returns one verdict too few."""

    async def judge(self, requests):
        return [RubricJudge().score(r) for r in requests[1:]]


@pytest.fixture
def train():
    return prompts("train")


def make_env(judge=None, schedule=None, specs=None, **kw) -> StyleShiftEnv:
    return StyleShiftEnv(
        judge if judge is not None else RubricJudge(),
        schedule if schedule is not None else paper_schedule(),
        specs if specs is not None else prompts("train"),
        **kw,
    )


def on_and_off_target(start: EpisodeStart, seed: int = 0) -> tuple[str, str]:
    other = next(s for s in start.target.candidates if s != start.target.style)
    rng = random.Random(seed)
    return generate(start.target.style, start.topic, rng), generate(other, start.topic, rng)


# ---- Gymnasium contract ----------------------------------------------------------------------


def test_check_env_passes_on_a_direct_and_a_made_env():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # A directly constructed env has no spec, so the checker cannot try render modes.
        warnings.filterwarnings("ignore", message=".*not having a spec")
        check_env(make_env())
        made = gymnasium.make(
            STYLE_SHIFT_ENV_ID, judge=RubricJudge(), schedule=paper_schedule(), prompt_specs=prompts("train")
        )
        check_env(made.unwrapped)


def test_gymnasium_make_reset_step():
    env = gymnasium.make(
        "testbed/StyleShift-v0", judge=RubricJudge(), schedule=paper_schedule(), prompt_specs=prompts("train")
    )
    obs, _info = env.reset(seed=0)
    assert isinstance(obs, str) and obs in env.observation_space
    obs2, reward, terminated, truncated, _info2 = env.step("hello there")
    assert obs2 == obs and terminated is True and truncated is False
    assert reward in (0.0, 1.0)
    assert isinstance(env.unwrapped, StyleShiftEnv)


def test_gymnasium_make_in_a_fresh_interpreter_needs_no_prior_import():
    """gymnasium's own `module:id` form imports the package that registers the ids."""
    import subprocess
    import sys

    code = (
        "import sys, gymnasium\n"
        "assert 'testbed' not in sys.modules\n"
        "env = gymnasium.make('testbed.envs:testbed/StyleShift-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "assert isinstance(obs, str) and 'styles:' in obs\n"
        "assert type(gymnasium.make('testbed.envs:testbed/Revision-v0').unwrapped).__name__ == 'RevisionEnv'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_reset_and_step_info(train):
    env = make_env(seed=3)
    obs, info = env.reset()
    assert set(info) == {"prompt_id", "topic", "t", "candidates"}  # the target style stays hidden
    assert info["t"] == 0 and info["candidates"] == C12
    spec = next(s for s in train if s.prompt_id == info["prompt_id"])
    assert spec.topic == info["topic"] and obs.startswith(spec.request)
    assert all(c in obs for c in C12) and "classical" not in obs
    _, _, _, _, step_info = env.step("the cat sleeps.")
    assert set(step_info) == {
        "target_style", "judged_style", "r_quality", "r_style", "t", "judge_error", "prompt_id", "topic"
    }  # fmt: skip
    assert step_info["target_style"] == "cute" and step_info["t"] == 0
    assert step_info["prompt_id"] == info["prompt_id"] and step_info["topic"] == info["topic"]
    assert step_info["judge_error"] is None
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("again, without a reset")


def test_on_target_piece_gets_reward_1_and_off_target_0():
    env = make_env()
    for _ in range(3):
        obs, info = env.reset()
        start = EpisodeStart(obs, info["prompt_id"], info["topic"], info["t"], env.schedule.target(info["t"]))
        good, bad = on_and_off_target(start)
        _, reward, _, _, step_info = env.step(good)
        assert reward == 1.0, step_info
        assert step_info["r_quality"] == 1 and step_info["r_style"] == 1
        assert step_info["judged_style"] == step_info["target_style"]
        env.reset(options={"clock": info["t"]})
        _, reward, _, _, step_info = env.step(bad)
        assert reward == 0.0 and step_info["r_style"] == 0, step_info


def test_clock_counts_judged_episodes_and_drives_the_target():
    env = make_env(schedule=paper_schedule(a=2, b=4))
    seen = []
    for expected_t in range(6):
        _, info = env.reset()
        assert info["t"] == expected_t
        _, _, _, _, step_info = env.step("a short reply.")
        seen.append(step_info["target_style"])
        assert env.clock == expected_t + 1
    assert seen == ["cute", "cute", "chuunibyou", "chuunibyou", "classical", "classical"]
    # resume: set the clock; a seeded reset starts a fresh stream at 0 (or at options["clock"])
    env.clock = 100
    assert env.reset()[1]["t"] == 100 and env.reset()[1]["candidates"] == C3
    assert env.reset(seed=1)[1]["t"] == 0
    assert env.reset(seed=1, options={"clock": 7})[1]["t"] == 7
    with pytest.raises(ValueError, match="clock"):
        env.clock = -1


def test_seeded_reset_replays_the_same_prompts():
    env = make_env()
    first = [env.reset(seed=5 if i == 0 else None)[0] for i in range(5)]
    again = [env.reset(seed=5 if i == 0 else None)[0] for i in range(5)]
    other = [env.reset(seed=6 if i == 0 else None)[0] for i in range(5)]
    assert first == again and first != other


# ---- batched path ----------------------------------------------------------------------------


def test_batch_is_one_judge_call_with_clocks_and_targets_across_a_switch():
    judge = CountingJudge()
    env = make_env(judge=judge, schedule=paper_schedule(a=4, b=8))
    env.clock = 5
    starts = env.reset_batch(6)
    assert env.clock == 5  # reset_batch does not move the clock
    assert [s.t for s in starts] == [5, 6, 7, 8, 9, 10]
    assert [s.target.style for s in starts] == ["chuunibyou"] * 3 + ["classical"] * 3
    for s in starts:
        assert s.prompt_text.endswith(f"styles: {', '.join(s.target.candidates)}.")
    responses = [on_and_off_target(s, seed=i)[i % 2] for i, s in enumerate(starts)]
    verdicts = env.step_batch(starts, responses)
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 6
    assert [r.target_style for r in judge.calls[0]] == [s.target.style for s in starts]
    assert [r.candidate_styles for r in judge.calls[0]] == [s.target.candidates for s in starts]
    assert [r.topic for r in judge.calls[0]] == [s.topic for s in starts]
    assert [v.reward for v in verdicts] == [1.0, 0.0] * 3
    assert env.clock == 11
    assert env.reset_batch(1)[0].t == 11


def test_reset_batch_repeat_resamples_each_prompt_in_a_row():
    env = make_env()
    starts = env.reset_batch(3, repeat=4)
    assert [s.t for s in starts] == list(range(12))
    ids = [s.prompt_id for s in starts]
    assert all(len(set(ids[i : i + 4])) == 1 for i in range(0, 12, 4))  # one prompt per group
    with pytest.raises(ValueError, match="repeat"):
        env.reset_batch(2, repeat=0)


def test_async_batch_and_sync_step_inside_a_running_loop():
    judge = CountingJudge()
    env = make_env(judge=judge)

    async def main():
        starts = env.reset_batch(4)
        verdicts = await env.astep_batch(starts, [on_and_off_target(s)[0] for s in starts])
        env.reset()
        env.step("a reply from sync code inside a loop.")  # runs on a worker thread's loop
        return verdicts

    verdicts = asyncio.run(main())
    assert [v.reward for v in verdicts] == [1.0] * 4
    assert env.clock == 5 and len(judge.calls) == 2


def test_empty_batch_and_mismatched_lengths():
    judge = CountingJudge()
    env = make_env(judge=judge)
    assert env.step_batch([], []) == [] and judge.calls == [] and env.clock == 0
    starts = env.reset_batch(2)
    with pytest.raises(ValueError, match="2 episode starts but 1 responses"):
        env.step_batch(starts, ["only one"])
    with pytest.raises(RuntimeError, match="one Verdict per request"):
        make_env(judge=ShortJudge()).step_batch(starts, ["a.", "b."])


def test_evaluate_batch_does_not_advance_the_clock():
    judge = CountingJudge()
    env = make_env(judge=judge, schedule=paper_schedule(a=4, b=8))
    env.clock = 3
    heldout = prompts("heldout")[:5]
    starts = env.eval_starts(heldout, t=9)
    assert [s.prompt_id for s in starts] == [p.prompt_id for p in heldout]
    assert all(s.t == 9 and s.target == Target("classical", C3) for s in starts)
    verdicts = env.evaluate_batch(starts, [generate("classical", s.topic, random.Random(1)) for s in starts])
    assert [v.reward for v in verdicts] == [1.0] * 5
    assert len(judge.calls) == 1 and env.clock == 3


# ---- judge failures --------------------------------------------------------------------------


def test_error_verdicts_do_not_advance_the_clock_and_are_reported():
    env = make_env(judge=FlakyJudge())
    env.clock = 2
    _, _info = env.reset()
    _, reward, terminated, truncated, step_info = env.step("anything.")
    assert terminated is True and truncated is False
    assert step_info["judge_error"] == "judge unavailable (test)"
    assert reward == 0.0 and step_info["t"] == 2
    assert env.clock == 2 and env.judge_errors == 1


def test_partial_failures_in_a_batch_advance_the_clock_by_the_successes():
    env = make_env(judge=FlakyJudge(fail_at={1, 3}))
    starts = env.reset_batch(5)
    verdicts = env.step_batch(starts, [on_and_off_target(s)[0] for s in starts])
    assert [v.error is not None for v in verdicts] == [False, True, False, True, False]
    assert [v.reward for i, v in enumerate(verdicts) if i not in (1, 3)] == [1.0] * 3
    assert env.clock == 3 and env.judge_errors == 2


# ---- construction ----------------------------------------------------------------------------


def test_construction_errors(train):
    with pytest.raises(ValueError, match="max_prompt_chars=20"):
        make_env(max_prompt_chars=20)
    with pytest.raises(ValueError, match="prompt_specs is empty"):
        make_env(specs=[])
    with pytest.raises(TypeError, match="judge must implement"):
        make_env(judge=object())
    with pytest.raises(TypeError, match="schedule must implement"):
        make_env(schedule=object())


def test_envs_package_never_imports_judges():
    """The core stands on its own: testbed/envs gets its judge through the constructor."""
    import ast
    import pathlib

    import testbed.envs

    for path in pathlib.Path(testbed.envs.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            assert not any(n == "judges" or n.startswith("judges.") for n in names), f"{path.name} imports {names}"


def test_after_a_failure_in_a_batch_across_a_switch_each_episode_keeps_the_target_it_was_judged_against():
    """Episode 1 of 6 fails; the batch straddles the switch at 4. Episode 4 is judged at clock 4
    (chuunibyou) but numbered 3 (cute's clock): its row must say chuunibyou, the judged target."""
    from testbed.runtimes.collect import Collector
    from testbed.types import Trajectory

    judge = FlakyJudge(fail_at={1})
    seen = []
    rubric_judge = judge.judge

    async def recording(requests):
        seen.extend(r.target_style for r in requests)
        return await rubric_judge(requests)

    judge.judge = recording
    env = make_env(judge=judge)
    collector = Collector(env, "arm", 0, group_size=1, budget=20)
    round_ = collector.issue(6, first_group=0)
    trajs = [Trajectory(prompt_tokens=[], segments=[], response_text=on_and_off_target(s)[0]) for s in round_.starts]
    collector.judge(round_, trajs)
    assert seen == ["cute"] * 4 + ["chuunibyou"] * 2
    assert [tr.t for tr in trajs] == [0, 1, 1, 2, 3, 4]
    ok = [i for i in range(6) if i != 1]
    assert [trajs[i].target_style for i in ok] == [seen[i] for i in ok]  # episode 4 (clock 3): chuunibyou
    assert trajs[4].target_style == "chuunibyou" and env._target(trajs[4].t).style == "cute"
