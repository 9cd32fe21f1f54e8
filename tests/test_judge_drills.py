"""The LLM judge against what a real GLM-4.7 endpoint does: thinking in `reasoning_content` or in
the text, truncation, a draft verdict in the thinking, a 429 with code 1113, a slow thinking phase.
Each drill is a real judge-server subprocess (`--drill MODE`, judges/drills.py) reached by the
real LiteLLM client over HTTP, as a real endpoint is; the verdicts must equal the wrapped rubric's
and the judge's counters must say what each drill cost. The counts are hand-computed from the
drill's definition: 8 requests; thinking of 64 tokens (truncate: 2,048 against max_tokens
1,024; the retry's budget is 4 x 1,024 = 4,096)."""

from __future__ import annotations

import asyncio
import os
import secrets

import pytest

from judges.drills import Drill
from judges.llm import LLMJudge
from judges.template import TruncatedReply, parse_verdict, split_reasoning
from tests.drill_servers import KEY_ENV, N, counters, drill_servers, drive
from tests.drill_servers import requests_and_rubric as shared_requests
from tests.test_llm_judge import key_of


@pytest.fixture(scope="module")
def drills():
    with drill_servers() as servers:
        yield servers


@pytest.fixture
def requests_and_rubric(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-drill-" + secrets.token_hex(8))
    return shared_requests()


# -- the final answer alone is parsed ---------------------------------------------------------------


def test_a_reasoning_cut_off_after_a_draft_gives_no_verdict():
    with pytest.raises(TruncatedReply, match="truncated"):
        parse_verdict('<think>let me see {"quality": 1, "style": "plain"} but wait')


def test_a_draft_in_think_tags_is_never_read():
    assert parse_verdict('<think>draft {"quality": 1, "style": "plain"}</think>{"quality": 0, "style": "cute"}')[
        :2
    ] == (
        0,
        "cute",
    )


def test_everything_up_to_a_lone_close_tag_is_reasoning():
    assert parse_verdict('The piece is fine…</think>{"quality": 0, "style": "cute"}')[:2] == (0, "cute")


@pytest.mark.parametrize(
    "text, split",
    [
        ('{"quality": 1}', ("", '{"quality": 1}')),
        ("<think>a</think>b", ("<think>a", "b")),
        ("a </think> b </THINK> c", ("a </think> b ", " c")),  # the last closing tag ends the thinking
        ("\n <thinking>still going", ("\n <thinking>still going", None)),
        ('{"reason": "a <think> tag"}', ("", '{"reason": "a <think> tag"}')),  # a tag inside the answer
    ],
)
def test_split_reasoning(text, split):
    assert split_reasoning(text) == split


# -- each drill through LiteLLM -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, expect",
    [
        # thinking in its own field: reported, and kept out of the answer
        (
            "reasoning_content",
            {"calls": N, "truncated": 0, "truncation_retries": 0, "repairs": 0, "reasoning_tokens": N * 64},
        ),
        # thinking in the text: the provider cannot count it apart (0), and it is never parsed
        ("think_tags", {"calls": N, "truncated": 0, "truncation_retries": 0, "repairs": 0, "reasoning_tokens": 0}),
        ("lone_close", {"calls": N, "truncated": 0, "truncation_retries": 0, "repairs": 0, "reasoning_tokens": 0}),
        # a draft verdict that differs from the final one: no repair turn, and not the draft's verdict
        ("draft", {"calls": N, "truncated": 0, "truncation_retries": 0, "repairs": 0, "reasoning_tokens": 0}),
        # cut off at 1,024 inside the thinking, then one retry at 4,096, where 2,048 fit
        (
            "truncate",
            {
                "calls": 2 * N,
                "truncated": N,
                "truncation_retries": N,
                "repairs": 0,
                "reasoning_tokens": N * (1024 + 2048),
            },
        ),
    ],
)
def test_each_drill_gives_the_rubrics_verdicts_at_a_known_cost(drills, requests_and_rubric, mode, expect):
    reqs, rubric = requests_and_rubric
    verdicts, s, served = drive(drills[mode], reqs)
    assert [v.error for v in verdicts] == [None] * N
    assert [key_of(v) for v in verdicts] == rubric
    assert counters(s) == expect and s["unparseable"] == 0 and s["failures"] == 0
    assert served["truncated"] == expect["truncated"] and served["reasoning_tokens"] == expect["reasoning_tokens"]
    if mode in ("think_tags", "lone_close", "draft"):  # the thinking is billed as output all the same
        assert s["answer_tokens"] >= N * 64


def test_the_draft_drill_would_mislead_a_parser_that_read_the_thinking(drills, requests_and_rubric):
    import openai

    reqs, _ = requests_and_rubric
    judge = LLMJudge(model="openai/x", api_base=drills["draft"].api_base, cache=False)
    messages = judge.template.render(reqs[0])
    judge.close()
    client = openai.OpenAI(base_url=drills["draft"].api_base, api_key="unused", max_retries=0)
    content = client.chat.completions.create(model="x", messages=messages).choices[0].message.content
    thinking, answer = content.split("</think>")
    draft = thinking[thinking.index("{") : thinking.index("}") + 1]
    assert parse_verdict(draft)[:2] != parse_verdict(answer)[:2]  # the drill bites: the draft is another verdict


def test_truncation_retried_with_thinking_off_where_the_setting_says(drills, requests_and_rubric):
    reqs, rubric = requests_and_rubric
    verdicts, s, served = drive(drills["truncate"], reqs, on_truncation="thinking_off")
    assert [key_of(v) for v in verdicts] == rubric
    assert counters(s) == {
        "calls": 2 * N,
        "truncated": N,
        "truncation_retries": N,
        "repairs": 0,
        "reasoning_tokens": N * 1024,
    }
    assert served["thinking_off"] == N  # the retries, and only they, turned thinking off


def test_still_truncated_after_the_retry_is_a_failure_that_says_so(drills, requests_and_rubric):
    reqs, _ = requests_and_rubric
    verdicts, s, _ = drive(drills["truncate"], reqs, max_tokens=256, truncation_max_tokens=512)
    assert all(v.error and v.error.startswith("truncated:") and "unparseable" not in v.error for v in verdicts)
    assert all(v.reward == 0.0 and v.style is None for v in verdicts)
    assert counters(s) == {
        "calls": 2 * N,
        "truncated": 2 * N,
        "truncation_retries": N,
        "repairs": 0,
        "reasoning_tokens": N * (256 + 512),
    }
    assert s["failures"] == N and s["unparseable"] == 0  # never repaired with an empty message


def test_thinking_off_answers_every_drill_plainly(drills, requests_and_rubric):
    reqs, rubric = requests_and_rubric
    for mode in ("reasoning_content", "lone_close", "truncate", "slow_reasoning"):
        verdicts, s, served = drive(drills[mode], reqs, thinking="off")
        assert [key_of(v) for v in verdicts] == rubric
        assert counters(s) == {"calls": N, "truncated": 0, "truncation_retries": 0, "repairs": 0, "reasoning_tokens": 0}
        assert served["thinking_off"] == N  # the openai/ route sends it in the body (extra_body)


def test_a_slow_reasoning_phase_is_waited_for_or_times_out(drills, requests_and_rubric):
    reqs, rubric = requests_and_rubric
    verdicts, s, _ = drive(drills["slow_reasoning"], reqs, timeout_s=10)
    assert [key_of(v) for v in verdicts] == rubric and min(v.latency_s for v in verdicts) >= 1.5
    assert counters(s)["reasoning_tokens"] == N * 64 and s["calls"] == N
    verdicts, s, _ = drive(drills["slow_reasoning"], reqs[:2], timeout_s=0.5, max_retries=1)
    assert all(v.error and "Timeout" in v.error for v in verdicts)  # a timeout shorter than the thinking
    assert (s["calls"], s["timeouts"], s["retries"], s["failures"]) == (4, 4, 2, 2)


def test_a_1113_refusal_stops_the_judge_naming_the_cause_and_the_key_variable(drills, requests_and_rubric):
    reqs, _ = requests_and_rubric
    verdicts, s, served = drive(drills["quota"], reqs, api_key_env=KEY_ENV, concurrency=1, max_retries=4)
    assert (s["calls"], s["refused"], s["not_sent"], s["retries"], s["rate_limited"]) == (1, 1, N - 1, 0, 0)
    assert served["quota_refused"] == 1 and s["failures"] == N
    for v in verdicts:
        assert v.error.startswith("judge refused: ") and "code 1113" in v.error and KEY_ENV in v.error
        assert "Insufficient balance" in v.error and v.reward == 0.0
    assert os.environ[KEY_ENV] not in " ".join(v.error for v in verdicts)


def test_drill_settings_are_checked():
    with pytest.raises(ValueError, match="drill must be one of"):
        Drill.of("sleepy")
    assert Drill.of("truncate").reasoning_tokens == 2048 and Drill.of("slow_reasoning").reasoning_ms == 1500.0


def test_a_refused_judge_sends_nothing_on_another_loop_either(drills, requests_and_rubric):
    """The latch is the judge's, not a loop's: after the refusal, a batch on a new loop makes no call."""
    reqs, _ = requests_and_rubric
    judge = LLMJudge(model="openai/glm-4.7", api_base=drills["quota"].api_base, cache=False, concurrency=1)
    try:
        asyncio.run(judge.judge(reqs[:1]))
        second = asyncio.run(judge.judge(reqs[1:3]))
    finally:
        judge.close()
    assert judge.stats()["calls"] == 1 and judge.stats()["not_sent"] == 2
    assert all(v.error and v.error.startswith("judge refused: ") for v in second)
