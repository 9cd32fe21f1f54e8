"""Retries of one judge call, on tenacity: which failures are retried, how long to wait, and the
message a call that gives up carries.

Retried: timeouts, 408/409/425/429, any 5xx, connection errors. The wait before re-attempt k
(k = 1, 2, ...) is full jitter, `uniform(0, min(backoff_max_s, backoff_base_s * 2**(k-1)))`, from
a seeded generator (so a drill replays), and never shorter than the server's Retry-After. A
Retry-After longer than `max_retry_after_s` fails the call at once: waiting minutes inside a
training step is worse than an excluded episode. Anything else (401, 400, ...) fails at once.

A refusal is not an outage: HTTP 401 or 403 (the key is rejected or not allowed), or a 429 whose
body carries a code the caller names (a provider's "no balance" or "wrong plan": Z.ai's 1113,
OpenAI's `insufficient_quota`). A plain rate-limit 429 is retried; a refusal never is, and gives
up with CallRefused, so the caller can stop asking.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

import tenacity

__all__ = [
    "AttemptError",
    "CallFailed",
    "CallRefused",
    "RetryPolicy",
    "call_with_retries",
    "classify",
    "refusal",
    "retry_after_s",
]

_T = TypeVar("_T")
_RETRYABLE_STATUS = {408, 409, 425, 429}


class CallFailed(Exception):
    """The call gave up; the message says why (no secrets: the caller scrubs it)."""


class CallRefused(CallFailed):
    """The provider refused the key (see `refusal`): no later call can succeed. `cause` is the
    short reason, the message adds the error itself."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(eq=False)
class AttemptError(Exception):
    """One failed attempt, classified: the error, its HTTP status (408 for a timeout) and the
    server's Retry-After in seconds, if it sent one."""

    error: BaseException
    status: int | None
    retry_after: float | None
    retryable: bool
    refused: str | None = None  # why the key is refused for good (`refusal`), if it is

    def describe(self) -> str:
        head = f"{type(self.error).__name__} (HTTP {self.status})" if self.status else type(self.error).__name__
        return f"{head}: {str(self.error)[:300]}"


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header on a LiteLLM/OpenAI error, if any."""
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if not headers:
            continue
        try:
            ms = headers.get("retry-after-ms")
            if ms is not None:
                return max(0.0, float(ms) / 1000.0)
            value = headers.get("retry-after")
            if value is None:
                continue
            try:
                return max(0.0, float(value))
            except ValueError:  # an HTTP date
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, AttributeError):
            continue
    return None


def _error_codes(exc: BaseException) -> set[str]:
    """The `code` and `type` an error's JSON body carries (OpenAI-style `{"error": {...}}` or the
    inner object the OpenAI client keeps as `.body`), as strings."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        try:
            body = json.loads(getattr(getattr(exc, "response", None), "text", "") or "null")
        except (ValueError, TypeError, AttributeError):
            body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    if not isinstance(body, dict):
        return set()
    return {str(body[k]) for k in ("code", "type") if body.get(k) is not None}


def refusal(exc: BaseException, codes: Collection[str] = ()) -> str | None:
    """Why a failed call means the provider refuses the key for good, or None for anything else
    (a plain 429 is a rate limit: retried). `codes`: the body codes that mean no balance or the
    wrong plan."""
    status = getattr(exc, "status_code", None)
    if status == 401:
        return "the key was rejected (HTTP 401)"
    if status == 403:
        return "the key is not allowed to use this model (HTTP 403)"
    if status == 429:
        found = sorted(_error_codes(exc) & set(codes))
        if found:
            return f"quota exhausted or a key for another plan (HTTP 429, code {found[0]})"
    return None


def classify(
    exc: BaseException,
    timeout_types: tuple[type[BaseException], ...] = (),
    connection_types: tuple[type[BaseException], ...] = (),
    refusal_codes: Collection[str] = (),
) -> AttemptError:
    """An attempt's exception -> AttemptError. `timeout_types` / `connection_types`: the client
    library's own classes (LiteLLM's Timeout, APIConnectionError) beside asyncio's and the OS's;
    `refusal_codes`: see `refusal`."""
    if isinstance(exc, (asyncio.TimeoutError, *timeout_types)):
        return AttemptError(exc, 408, None, True)
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    refused = refusal(exc, refusal_codes)
    retryable = refused is None and (
        status in _RETRYABLE_STATUS
        or (status is not None and status >= 500)
        or isinstance(exc, (ConnectionError, *connection_types))
    )
    return AttemptError(exc, status, retry_after_s(exc), retryable, refused)


@dataclass
class RetryPolicy:
    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    max_retry_after_s: float = 120.0
    seed: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def backoff(self, retry: int) -> float:
        """Full jitter before re-attempt `retry` (1-based)."""
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** (retry - 1)) * self._rng.random()


class _Wait(tenacity.wait.wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, state: tenacity.RetryCallState) -> float:
        err = state.outcome.exception() if state.outcome else None
        floor = err.retry_after if isinstance(err, AttemptError) and err.retry_after else 0.0
        return max(self.policy.backoff(state.attempt_number), floor)


def _should_retry(policy: RetryPolicy) -> Callable[[BaseException], bool]:
    def check(exc: BaseException) -> bool:
        return (
            isinstance(exc, AttemptError)
            and exc.retryable
            and (exc.retry_after is None or exc.retry_after <= policy.max_retry_after_s)
        )

    return check


async def call_with_retries(
    attempt: Callable[[], Awaitable[_T]], policy: RetryPolicy, on_retry: Callable[[float], None] = lambda wait_s: None
) -> _T:
    """`await attempt()` until it returns; it raises AttemptError for a failed attempt. Calls
    `on_retry(wait_s)` before each wait. Raises CallFailed (with the reason) when it gives up."""
    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(policy.max_retries + 1),
        wait=_Wait(policy),
        retry=tenacity.retry_if_exception(_should_retry(policy)),
        before_sleep=lambda state: on_retry(state.upcoming_sleep),
        reraise=True,
    )
    tries = 0

    async def counted() -> _T:
        nonlocal tries
        tries += 1
        return await attempt()

    try:
        return await retrying(counted)
    except AttemptError as err:
        if err.refused is not None:
            raise CallRefused(err.refused, f"judge call refused: {err.describe()}") from None
        if not err.retryable:
            raise CallFailed(f"judge call failed, not retryable: {err.describe()}") from None
        if err.retry_after is not None and err.retry_after > policy.max_retry_after_s:
            raise CallFailed(
                f"judge call failed: Retry-After {err.retry_after:g} s exceeds max_retry_after_s: {err.describe()}"
            ) from None
        raise CallFailed(f"judge call failed after {tries} attempts: {err.describe()}") from None
