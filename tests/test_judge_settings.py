"""The LLM judge's request settings (judges/request.py, judges/config.py): thinking and JSON mode on
the wire through LiteLLM's routes, LiteLLM's price for `zai/glm-4.7`, every setting that changes
a verdict in the cache key, and the client-side minute limits (judges/limits.py). HTTP goes to the
local server's drills (tests/test_judge_drills.py) through the real LiteLLM client."""

from __future__ import annotations

import asyncio
import secrets
import time

import litellm
import pytest

from judges.cache import cache_key
from judges.limits import MinuteLimits, estimate_tokens
from judges.llm import LLMJudge
from judges.template import TEMPLATE_DIR
from tests.drill_servers import KEY_ENV, N, drill_servers, drive
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


# -- request settings on the wire ------------------------------------------------------------------------


def test_the_zai_route_sends_thinking_natively_and_knows_the_price(drills, requests_and_rubric):
    reqs, rubric = requests_and_rubric
    price = litellm.model_cost["zai/glm-4.7"]  # LiteLLM's local price map, as the judge reads it
    for thinking, reasoning in (("on", N * 64), ("off", 0)):
        verdicts, s, served = drive(
            drills["reasoning_content"],
            reqs,
            model="zai/glm-4.7",
            api_key_env=KEY_ENV,
            thinking=thinking,
            json_mode=True,
        )
        assert [key_of(v) for v in verdicts] == rubric
        assert served["thinking_off"] == (N if thinking == "off" else 0) and served["json_mode"] == N
        assert s["reasoning_tokens"] == reasoning and s["cost_unknown_calls"] == 0
        cost = (
            s["prompt_tokens"] * price["input_cost_per_token"] + s["completion_tokens"] * price["output_cost_per_token"]
        )
        assert s["cost_usd"] == pytest.approx(cost, rel=1e-9) and s["cost_usd"] > 0
        assert s["reasoning_cost_usd"] == pytest.approx(reasoning * price["output_cost_per_token"], rel=1e-9)


def test_json_mode_where_the_route_does_not_take_it_is_a_config_error():
    with pytest.raises(ValueError, match="json_mode: LiteLLM's route for openai/gpt-4 does not take response_format"):
        LLMJudge(model="openai/gpt-4", api_base="http://127.0.0.1:1/v1", json_mode=True, cache=False)


@pytest.mark.parametrize(
    "args, text",
    [
        ({"truncation_max_tokens": 1024}, "truncation_max_tokens must be more than max_tokens"),
        (
            {"thinking": "off", "extra_params": {"extra_body": {"thinking": {"type": "enabled"}}}},
            "thinking is set twice",
        ),
        ({"json_mode": True, "extra_params": {"response_format": {"type": "text"}}}, "response format"),
        ({"thinking": "maybe"}, "thinking: Input should be 'on' or 'off'"),
    ],
)
def test_inconsistent_settings_name_the_field(args, text):
    with pytest.raises(ValueError, match=text):
        LLMJudge(api_base="http://127.0.0.1:1/v1", cache=False, **args)


def test_yaml_off_is_thinking_off():
    import yaml

    from judges.config import LLMJudgeConfig

    assert LLMJudgeConfig(**yaml.safe_load("thinking: off\njson_mode: true")).thinking == "off"


# -- the verdict cache ----------------------------------------------------------------------------------


def test_the_same_request_with_thinking_on_then_off_makes_two_calls(drills, requests_and_rubric, tmp_path):
    reqs, _ = requests_and_rubric
    path = str(tmp_path / "verdicts.sqlite")
    calls = []
    for thinking in ("on", "off", "on"):
        judge = LLMJudge(
            model="openai/glm-4.7", api_base=drills["reasoning_content"].api_base, cache_path=path, thinking=thinking
        )
        try:
            judge.judge_sync(reqs[:1])
        finally:
            judge.close()
        calls.append((judge.stats()["calls"], judge.stats()["cache_hits"]))
    assert calls == [(1, 0), (1, 0), (0, 1)]  # two calls, not one; the third is the first's verdict


@pytest.mark.parametrize(
    "change",
    [
        {"model": "openai/glm-4.6"},
        {"temperature": 0.7},
        {"max_tokens": 2048},
        {"thinking": "on"},
        {"thinking": "off"},
        {"json_mode": True},
        {"on_truncation": "thinking_off"},
        {"truncation_max_tokens": 8192},
        {"extra_params": {"top_p": 0.9}},
        {"template": "other"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_setting_that_changes_a_verdict_changes_the_cache_key(change, tmp_path, requests_and_rubric):
    reqs, _ = requests_and_rubric
    if "template" in change:  # a second template version: the same text under another version tag
        text = (TEMPLATE_DIR / "style_judge_v1.txt").read_text().replace("style_judge_v1", "style_judge_v9")
        (tmp_path / "style_judge_v9.txt").write_text(text)
        change = {"template": str(tmp_path / "style_judge_v9.txt")}
    base = dict(model="openai/glm-4.7", api_base="http://127.0.0.1:1/v1", cache=False)
    one, other = LLMJudge(**base), LLMJudge(**{**base, **change})
    try:
        assert one._key(reqs[0]) != other._key(reqs[0])
        assert one._key(reqs[0]) == LLMJudge(**base)._key(reqs[0])  # and the same settings, the same key
    finally:
        one.close()
        other.close()


def test_cache_key_settings_ignore_their_order():
    args = ("m", "v1", "p", "r", "cute", ("cute",), None, None)
    assert cache_key(*args, {"a": 1, "b": {"x": 1, "y": 2}}) == cache_key(*args, {"b": {"y": 2, "x": 1}, "a": 1})
    assert cache_key(*args, {"a": 1}) != cache_key(*args, {"a": 2}) != cache_key(*args)


# -- client-side minute limits ---------------------------------------------------------------------------


def test_requests_per_minute_spaces_the_calls(drills, requests_and_rubric):
    reqs, rubric = requests_and_rubric
    judge = LLMJudge(
        model="openai/glm-4.7", api_base=drills["reasoning_content"].api_base, cache=False, requests_per_minute=2
    )
    judge._limits.window_s = 0.4  # the same rule on a short window, so the test need not wait a minute
    try:
        t0 = time.perf_counter()
        verdicts = judge.judge_sync(reqs[:6])
        elapsed = time.perf_counter() - t0
    finally:
        judge.close()
    assert [key_of(v) for v in verdicts] == rubric[:6]
    assert elapsed >= 2 * 0.4 and judge.stats()["throttle_wait_s"] > 0.4  # 2 at once, then 2 per window


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_requests_per_minute_is_a_sliding_window():
    clock = FakeClock()
    limits = MinuteLimits(requests=2, tokens=None, clock=clock)
    for t in (0.0, 1.0):
        clock.now = t
        assert asyncio.run(limits.acquire(10))[1] == 0.0  # fits: no wait
    assert limits.wait_s(10, now=2.0) == 58.0  # the call at t=0 leaves the window at t=60
    assert limits.wait_s(10, now=60.5) == 0.0 and len(limits._log) == 1  # it has left


def test_tokens_per_minute_waits_for_enough_tokens_to_leave_the_window():
    clock = FakeClock()
    limits = MinuteLimits(requests=None, tokens=1000, clock=clock)
    first, _ = asyncio.run(limits.acquire(800))
    limits.settle(first, 600)  # the reply said 600 tokens, not the 800 reserved
    clock.now = 10.0
    asyncio.run(limits.acquire(300))
    assert limits.wait_s(50, now=20.0) == 0.0  # 600 + 300 + 50 <= 1000
    assert limits.wait_s(200, now=20.0) == 40.0  # 1,100: the 600 must leave first (at t=60)
    assert limits.wait_s(5000, now=20.0) == 50.0  # over the limit alone: sent when the window is empty
    assert MinuteLimits(None, 1000).wait_s(5000, now=0.0) == 0.0


def test_a_call_is_estimated_at_its_prompt_and_its_whole_budget():
    assert estimate_tokens([{"role": "user", "content": "x" * 400}, {"role": "system", "content": ""}], 1024) == 1124
