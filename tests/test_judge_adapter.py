"""testbed.judge_adapter.as_judge: sync/async callables and objects become Judges."""

from __future__ import annotations

import asyncio

import pytest

from examples.custom_judge import LengthAwareJudge, make_keyword_judge
from judges.rubric import RubricJudge
from testbed.judge_adapter import as_judge
from testbed.protocols import Judge
from testbed.types import JudgeRequest, Verdict

REQS = [JudgeRequest("write about coffee.", "the coffee is nice.", "cute", ("cute", "academic"), "coffee"),
        JudgeRequest("write about tea.", "thou art tea.", "classical", ("classical",), "tea")]


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


@pytest.mark.parametrize("judge, expect", [
    (SyncBatch(), [(1, 1, "cute"), (1, 1, "classical")]),
    (SyncScore(), [(1, 1, "cute"), (1, 0, "cute")]),
    (AsyncScore(), [(0, 1, "cute"), (0, 1, "classical")]),
    (sync_fn, [(1, 1, "academic"), (1, 1, "academic")]),
    (async_fn, [(1, 0, "plain"), (1, 0, "plain")]),
    (lambda req: (1, "classical"), [(1, 0, "classical"), (1, 1, "classical")]),
    (LengthAwareJudge(strict_topic=False), [(1, 0, "plain"), (1, 0, "plain")]),
    (make_keyword_judge("coffee"), [(1, 0, "plain"), (0, 0, "plain")]),
])
def test_accepted_shapes(judge, expect):
    verdicts = run(judge)
    assert [(v.quality, v.style_match, v.style) for v in verdicts] == expect
    assert all(v.error is None for v in verdicts)


def test_stats_pass_through():
    assert as_judge(SyncBatch()).stats() == {"judge_calls": 7.0}
    assert as_judge(sync_fn).stats() == {}


def test_exceptions_become_failed_verdicts():
    def boom(req):
        raise RuntimeError("endpoint down")

    class BoomBatch:
        def judge(self, requests):
            raise ConnectionError("nope")

    for judge in (boom, BoomBatch()):
        verdicts = run(judge)
        assert len(verdicts) == 2 and all(v.error and v.reward == 0.0 for v in verdicts)
    assert "endpoint down" in run(boom)[0].error
    assert run(lambda req: {"error": "judge refused"})[0].error == "judge refused"


@pytest.mark.parametrize("bad, match", [
    (None, "None"), (RubricJudge, "pass an instance"), (42, "not a judge"), (object(), "not a judge"),
])
def test_rejected_objects(bad, match):
    with pytest.raises(TypeError, match=match):
        as_judge(bad)


@pytest.mark.parametrize("result, match", [
    ("good", "returned str"), ({"quality": 1}, "without 'quality' and 'style'"), ((2, "cute"), "quality=2"),
    ({"quality": "1", "style": "cute"}, "quality='1'"), ((1, 5), "style=5"),
])
def test_wrong_return_types_raise(result, match):
    with pytest.raises(TypeError, match=match):
        run(lambda req: result)
    with pytest.raises(TypeError, match="returned 1 results for 2"):
        run(type("Short", (), {"judge": lambda self, reqs: [(1, "cute")]})())
