"""testbed.judging.adapter.as_judge: sync/async callables and objects become Judges."""

from __future__ import annotations

import asyncio

import pytest

from examples.custom_judge import LengthAwareJudge, make_keyword_judge
from judges.rubric import RubricJudge
from testbed.judging.adapter import as_judge
from testbed.protocols import Judge
from testbed.types import JudgeRequest, Verdict

REQS = [
    JudgeRequest("write about coffee.", "the coffee is nice.", "cute", ("cute", "academic"), "coffee"),
    JudgeRequest("write about tea.", "thou art tea.", "classical", ("classical",), "tea"),
]


def run(judge) -> list[Verdict]:
    j = as_judge(judge)
    assert isinstance(j, Judge) and asyncio.iscoroutinefunction(j.judge)
    return asyncio.run(j.judge(REQS))


def test_async_judge_object_is_returned_unchanged():
    rubric = RubricJudge()
    assert as_judge(rubric) is rubric


class SyncBatch:
    def judge(self, requests):
        return [Verdict(1, 1, r.target_style) for r in requests]

    def stats(self):
        return {"judge_calls": 7.0}


class SyncScore:
    def score(self, req):
        return {"quality": True, "style": "cute", "reason": "why"}


class AsyncScore:
    async def score(self, req):
        return (0, req.target_style)


def sync_fn(req):
    return {"quality": 1, "style": "academic", "style_match": 1}


async def async_fn(req):
    await asyncio.sleep(0)
    return Verdict(quality=1, style_match=0, style="plain")


@pytest.mark.parametrize(
    "judge, expect",
    [
        (SyncBatch(), [(1, 1, "cute"), (1, 1, "classical")]),
        (SyncScore(), [(1, 1, "cute"), (1, 0, "cute")]),
        (AsyncScore(), [(0, 1, "cute"), (0, 1, "classical")]),
        (sync_fn, [(1, 1, "academic"), (1, 1, "academic")]),
        (async_fn, [(1, 0, "plain"), (1, 0, "plain")]),
        (lambda req: (1, "classical"), [(1, 0, "classical"), (1, 1, "classical")]),
        (LengthAwareJudge(strict_topic=False), [(1, 0, "plain"), (1, 0, "plain")]),
        (make_keyword_judge("coffee"), [(1, 0, "plain"), (0, 0, "plain")]),
    ],
)
def test_accepted_shapes(judge, expect):
    verdicts = run(judge)
    assert [(v.quality, v.style_match, v.style) for v in verdicts] == expect
    assert all(v.error is None for v in verdicts)


def test_stats_pass_through():
    assert as_judge(SyncBatch()).stats() == {"judge_calls": 7.0}
    assert as_judge(sync_fn).stats() == {}


def test_outages_become_failed_verdicts():
    def boom(req):
        raise TimeoutError("endpoint down")

    class BoomBatch:
        def judge(self, requests):
            raise ConnectionError("nope")

    for judge in (boom, BoomBatch()):
        verdicts = run(judge)
        assert len(verdicts) == 2 and all(v.error and v.reward == 0.0 for v in verdicts)
    assert "endpoint down" in run(boom)[0].error
    assert run(lambda req: {"error": "judge refused"})[0].error == "judge refused"


@pytest.mark.parametrize(
    "bad, match",
    [
        (None, "None"),
        (RubricJudge, "pass an instance"),
        (42, "not a judge"),
        (object(), "not a judge"),
    ],
)
def test_rejected_objects(bad, match):
    with pytest.raises(TypeError, match=match):
        as_judge(bad)


@pytest.mark.parametrize(
    "result, match",
    [
        ("good", "returned str"),
        ({"quality": 1}, "without 'quality' and 'style'"),
        ((2, "cute"), "quality=2"),
        ({"quality": "1", "style": "cute"}, "quality='1'"),
        ((1, 5), "style=5"),
    ],
)
def test_wrong_return_types_raise(result, match):
    with pytest.raises(TypeError, match=match):
        run(lambda req: result)
    with pytest.raises(TypeError, match="returned 1 results for 2"):
        run(type("Short", (), {"judge": lambda self, reqs: [(1, "cute")]})())


class StatusError(Exception):
    def __init__(self, status_code):
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def test_outage_or_bug_by_exception_class_and_status():
    from testbed.judging.adapter import is_outage

    assert is_outage(TimeoutError()) and is_outage(ConnectionResetError()) and is_outage(TimeoutError())
    assert is_outage(StatusError(503)) and is_outage(StatusError(429))
    assert not is_outage(StatusError(400)) and not is_outage(KeyError("x")) and not is_outage(ValueError())


def test_a_judge_that_raises_before_any_verdict_is_a_bug_that_stops_at_once():
    from testbed.judging.adapter import JudgePluginError

    def broken(req):
        return {"quality": 1, "style": req.missing_field}  # AttributeError: a bug

    with pytest.raises(JudgePluginError, match="AttributeError before it returned any verdict") as info:
        run(broken)
    assert isinstance(info.value.__cause__, AttributeError)  # the traceback the run prints


def test_after_verdicts_a_sporadic_error_fails_one_call_and_a_repeated_one_stops():
    from testbed.judging.adapter import BUG_REPEATS, JudgePluginError

    calls = {"n": 0}

    def flaky(req):
        calls["n"] += 1
        if calls["n"] == 1 or calls["n"] == 3:
            return (1, "cute")
        raise KeyError("topic")

    judge = as_judge(flaky)
    verdicts = asyncio.run(judge.judge(REQS + REQS[:1]))  # ok, KeyError, ok
    assert [v.error is None for v in verdicts] == [True, False, True]
    with pytest.raises(JudgePluginError, match=f"KeyError {BUG_REPEATS} calls in a row"):
        asyncio.run(judge.judge(REQS * BUG_REPEATS))


def test_async_per_request_judges_run_concurrently():
    import time

    class Slow:
        concurrency = 32

        async def score(self, req):
            await asyncio.sleep(0.05)
            return (1, req.target_style)

    judge = as_judge(Slow())
    t0 = time.perf_counter()
    verdicts = asyncio.run(judge.judge(REQS * 16))
    elapsed = time.perf_counter() - t0
    assert len(verdicts) == 32 and all(v.error is None for v in verdicts)
    assert elapsed < 0.3 * 32 * 0.05, elapsed  # one at a time would take 1.6 s

    Slow.concurrency = 1
    t0 = time.perf_counter()
    asyncio.run(as_judge(Slow()).judge(REQS * 2))
    assert time.perf_counter() - t0 >= 4 * 0.05  # the judge's own limit is kept


def test_a_factory_named_with_args_is_called_with_them_and_returns_the_judge():
    from testbed.judging.build import judge_from_config
    from testbed.registry import is_factory
    from testbed.scenario.plugins import JudgeConfig

    judge = judge_from_config(
        JudgeConfig.model_validate({"type": "examples.custom_judge:make_keyword_judge", "args": {"bonus_word": "tea"}}),
        "judge",
    )
    verdicts = asyncio.run(judge.judge(REQS))
    assert [v.quality for v in verdicts] == [0, 1]  # the factory's argument took effect
    assert not is_factory(sync_fn, {}) and is_factory(make_keyword_judge, {}) and is_factory(SyncScore, {})
