"""StyleShiftEnv keeps ONE event loop for its lifetime (testbed/envs/style_shift.py): every sync
step runs on it, a judge's loop-bound async state survives across steps, a wrong judge's error
comes out clean, and env.close() closes the loop."""

from __future__ import annotations

import asyncio
import random
import threading
import traceback

import pytest

from judges.rubric import RubricJudge
from testbed.envs.schedules import Phase, PiecewiseSchedule
from testbed.envs.style_shift import StyleShiftEnv
from testbed.judging.adapter import as_judge
from testbed.world import generate, prompts


def schedule() -> PiecewiseSchedule:
    return PiecewiseSchedule([Phase("cute", 0, 1000, ("academic", "cute", "chuunibyou"))])


def make_env(judge) -> StyleShiftEnv:
    return StyleShiftEnv(judge, schedule(), prompts("train"), seed=0)


class LoopBoundJudge:
    """Holds an asyncio.Semaphore made on the first call and contended on every call, so it is
    bound to that first loop (as an HTTP client's pool is): on any other loop it raises."""

    def __init__(self) -> None:
        self.sem: asyncio.Semaphore | None = None
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[str] = []
        self.rubric = RubricJudge()

    async def judge(self, requests):
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread().name)
        self.sem = self.sem or asyncio.Semaphore(1)

        async def one(req):
            async with self.sem:
                await asyncio.sleep(0)  # the next one waits: the semaphore binds to this loop
                return self.rubric.score(req)

        return list(await asyncio.gather(*(one(r) for r in requests)))


def _chain(exc: BaseException) -> list[BaseException]:
    out = []
    while exc is not None:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def test_steps_share_one_loop_and_a_loop_bound_judge_keeps_working():
    judge = LoopBoundJudge()
    env = make_env(judge)
    env.reset(seed=0)
    starts = env.reset_batch(3)
    texts = [generate("cute", s.topic, random.Random(i)) for i, s in enumerate(starts)]
    env.step_batch(starts, texts)
    env.evaluate_batch(env.eval_starts(prompts("heldout")[:2], 0), ["a piece.", "another piece."])
    env.reset()
    env.step("a third piece.")
    env.step_batch(env.reset_batch(2), ["x.", "y."])
    assert len(judge.loops) == 4 and all(loop is env.loop for loop in judge.loops)
    assert env.clock == 6
    env.close()


def test_inside_a_running_loop_the_same_env_loop_runs_in_a_worker_thread():
    judge = LoopBoundJudge()
    env = make_env(judge)
    env.step_batch(env.reset_batch(2), ["a.", "b."])  # binds the judge to the env's loop

    async def notebook_cell():
        caller = asyncio.get_running_loop()
        verdicts = env.step_batch(env.reset_batch(2), ["c.", "d."])  # blocks; runs the env's loop elsewhere
        return caller, verdicts

    caller, verdicts = asyncio.run(notebook_cell())
    assert len(verdicts) == 2 and all(v.error is None for v in verdicts)
    assert judge.loops[0] is judge.loops[1] is env.loop and caller is not env.loop
    assert judge.threads[0] == threading.main_thread().name != judge.threads[1]
    env.close()


@pytest.mark.parametrize(
    "judge, kind, text",
    [
        (as_judge(lambda req: "not a verdict"), TypeError, "returned str"),
        (as_judge(lambda req: {"quality": 3, "style": "cute"}), TypeError, "quality=3"),
        (
            type("Short", (), {"judge": lambda self, reqs: asyncio.sleep(0, result=[])})(),
            RuntimeError,
            "must return one Verdict per request",
        ),
    ],
)
def test_a_wrong_judge_gets_its_own_clean_error(judge, kind, text):
    env = make_env(judge)
    with pytest.raises(kind, match=text) as info:
        env.step_batch(env.reset_batch(2), ["a.", "b."])
    shown = "".join(traceback.format_exception(info.value))
    assert "no running event loop" not in shown
    assert [type(e) for e in _chain(info.value)] == [kind]  # nothing chained under it
    env.close()


def test_close_closes_the_loop_and_its_leftover_tasks():
    env = make_env(RubricJudge())
    env.step_batch(env.reset_batch(1), ["a."])
    loop = env.loop
    leftover = loop.create_task(asyncio.sleep(3600))  # e.g. a client library's background worker
    env.close()
    env.close()  # idempotent
    assert loop.is_closed() and leftover.cancelled()
    with pytest.raises(RuntimeError, match="env is closed"):
        env.step_batch(env.reset_batch(1), ["a."])
    with pytest.raises(RuntimeError, match="env is closed"):
        _ = env.loop  # reading the attribute is what raises


def test_an_env_nobody_closes_closes_its_loop_when_collected():
    import gc

    env = make_env(RubricJudge())
    env.step_batch(env.reset_batch(1), ["a."])
    loop = env.loop
    del env
    gc.collect()
    assert loop.is_closed()
