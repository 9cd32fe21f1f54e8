"""What the judge-drill tests share (tests/test_judge_drills.py, tests/test_judge_settings.py): the
local server's drills started on first use, the requests and the rubric's verdicts on them, and
`drive`, which judges through a fresh LLM judge and checks the accounting identities."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from judges.llm import LLMJudge, LocalJudgeServer
from judges.rubric import RubricJudge
from testbed.types import JudgeRequest
from tests.test_llm_judge import corpus, key_of

N = 8  # requests per drive
KEY_ENV = "TESTBED_TEST_DRILL_KEY"


class Servers(dict):
    """One drill server per mode, started on first use (a test worker starts only those it needs)."""

    def __missing__(self, mode: str) -> LocalJudgeServer:
        server = self[mode] = LocalJudgeServer({"judge": "rubric", "drill": mode})
        return server


@contextmanager
def drill_servers() -> Iterator[Servers]:
    servers = Servers()
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@functools.cache
def requests_and_rubric() -> tuple[list[JudgeRequest], list[tuple]]:
    """N requests (6 well-formed pieces, 2 corrupted) and the rubric's verdicts on them."""
    reqs = corpus(6, 2, seed=50)
    return reqs, [key_of(RubricJudge().score(r)) for r in reqs]


def drive(server: LocalJudgeServer, reqs: list[JudgeRequest], **args: Any) -> tuple[list, dict, dict]:
    """Judge `reqs` through a fresh LLM judge on `server` (no cache): (verdicts, the judge's
    counters, what the server counted meanwhile), after checking the accounting identities."""
    before = server.stats()
    judge = LLMJudge(
        model=args.pop("model", "openai/glm-4.7"),
        api_base=server.api_base,
        cache=False,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        **args,
    )
    try:
        verdicts = judge.judge_sync(reqs)
    finally:
        judge.close()
    after = server.stats()
    s = judge.stats()
    assert s["requests"] == s["judged"] + s["failures"] + s["cache_hits"]
    assert s["calls"] + s["not_sent"] == (
        s["judged"] + s["failures"] - s["deduplicated"] + s["retries"] + s["repairs"] + s["truncation_retries"]
    )
    assert s["completion_tokens"] == s["reasoning_tokens"] + s["answer_tokens"]
    assert s["calls"] == after["chat_completions"] - before["chat_completions"]  # every call reached the server
    return verdicts, s, {k: after[k] - before[k] for k in after if isinstance(after[k], int)}


def counters(s: dict) -> dict:
    return {k: int(s[k]) for k in ("calls", "truncated", "truncation_retries", "repairs", "reasoning_tokens")}
