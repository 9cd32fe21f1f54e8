"""The LLM judge's retry policy (judges/retry.py, on tenacity), on real exceptions: what is
retried, how long it waits, and why a call gives up."""

from __future__ import annotations

import asyncio

import pytest

from judges.retry import AttemptError, CallFailed, CallRefused, RetryPolicy, call_with_retries, classify, refusal

CODES = ("1113", "insufficient_quota")


class StatusError(Exception):
    def __init__(self, status: int, retry_after: str | None = None, body: dict | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.litellm_response_headers = {"retry-after": retry_after} if retry_after else {}
        self.body = body  # as the OpenAI client keeps an error's JSON body (its "error" object)


def run(errors: list[BaseException], policy: RetryPolicy) -> tuple[object, list[float], int]:
    """Fail with each error in turn, then succeed; (result or CallFailed, waits, attempts)."""
    waits: list[float] = []
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls <= len(errors):
            raise classify(errors[calls - 1], refusal_codes=CODES)
        return "ok"

    async def main() -> object:
        try:
            return await call_with_retries(attempt, policy, waits.append)
        except CallFailed as exc:
            return exc

    return asyncio.run(main()), waits, calls


def test_retryable_failures_are_retried_then_succeed():
    errors = [TimeoutError(), StatusError(429), StatusError(503), ConnectionRefusedError()]
    result, waits, calls = run(errors, RetryPolicy(max_retries=4, backoff_base_s=0.001, backoff_max_s=0.004))
    assert result == "ok" and calls == 5 and len(waits) == 4
    assert all(0 <= w <= 0.004 for w in waits)


def test_gives_up_after_the_last_retry_naming_the_error():
    result, waits, calls = run([StatusError(500)] * 5, RetryPolicy(max_retries=2, backoff_base_s=0.0))
    assert isinstance(result, CallFailed) and calls == 3 and len(waits) == 2
    assert "after 3 attempts: StatusError (HTTP 500): HTTP 500" in str(result)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_fail_at_once(status):
    result, waits, calls = run([StatusError(status)], RetryPolicy(max_retries=4))
    assert isinstance(result, CallFailed) and "not retryable" in str(result) and calls == 1 and waits == []
    assert not isinstance(result, CallRefused)


@pytest.mark.parametrize(
    "error, cause",
    [
        (StatusError(429, body={"code": "1113", "message": "Insufficient balance"}), "HTTP 429, code 1113"),
        (StatusError(429, body={"error": {"code": 1113}}), "HTTP 429, code 1113"),  # the whole body, a number
        (StatusError(429, body={"type": "insufficient_quota", "code": None}), "code insufficient_quota"),
        (StatusError(401), "rejected (HTTP 401)"),
        (StatusError(403), "not allowed to use this model (HTTP 403)"),
    ],
)
def test_a_refused_key_gives_up_at_once_with_its_cause(error, cause):
    result, waits, calls = run([error] * 3, RetryPolicy(max_retries=4))
    assert isinstance(result, CallRefused) and cause in result.cause and calls == 1 and waits == []


def test_a_plain_rate_limit_429_is_retried_not_refused():
    plain = [StatusError(429, body={"code": "1302", "message": "rate limit"}), StatusError(429, body=None)]
    assert [refusal(e, CODES) for e in plain] == [None, None]
    result, waits, calls = run(plain, RetryPolicy(max_retries=4, backoff_base_s=0.0))
    assert result == "ok" and calls == 3 and len(waits) == 2
    assert refusal(StatusError(429, body={"code": "1113"}), codes=()) is None  # only the codes named


def test_retry_after_sets_the_least_wait_and_a_long_one_fails_at_once():
    result, waits, _ = run([StatusError(429, "0.05")], RetryPolicy(backoff_base_s=0.0))
    assert result == "ok" and waits == [0.05]
    result, waits, calls = run([StatusError(429, "600")], RetryPolicy(max_retry_after_s=120))
    assert isinstance(result, CallFailed) and "Retry-After 600 s exceeds max_retry_after_s" in str(result)
    assert calls == 1 and waits == []


def test_jitter_is_seeded_and_grows_with_the_attempt():
    a = [RetryPolicy(seed=3, backoff_base_s=1.0, backoff_max_s=8.0).backoff(k) for k in range(1, 6)]
    b = [RetryPolicy(seed=3, backoff_base_s=1.0, backoff_max_s=8.0).backoff(k) for k in range(1, 6)]
    assert a == b and all(0 <= w <= min(8.0, 2 ** (k - 1)) for k, w in enumerate(a, 1))


def test_classify():
    assert classify(TimeoutError()).status == 408
    err = classify(StatusError(429, "3"))
    assert isinstance(err, AttemptError) and (err.status, err.retry_after, err.retryable) == (429, 3.0, True)
    assert not classify(ValueError("x")).retryable
