"""Client-side request and token limits: `requests_per_minute` and `tokens_per_minute`, as a
provider counts them, over any 60 s window. A call waits until the window holds room for it,
instead of being sent to get a 429 (whose retry costs a call and a backoff).

A sliding window log: each call sent in the last `window_s` seconds is an entry (its start time,
its tokens). Its tokens are not known before the reply, so a call reserves an estimate (its prompt
at 4 characters a token, plus its whole `max_tokens`: an upper bound) and `settle` replaces the
estimate with the reply's `total_tokens`. A call whose estimate alone is over the token limit is
sent when the window is empty (else it would wait forever). The log is shared by every event loop
the judge runs on (a lock guards it; waits are `asyncio.sleep`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

__all__ = ["MinuteLimits", "estimate_tokens"]


def estimate_tokens(messages: list[dict[str, str]], max_tokens: int) -> int:
    """An upper-bound guess of a call's total tokens before it is sent."""
    chars = sum(len(m.get("content") or "") for m in messages)
    return chars // 4 + max_tokens


class _Entry:
    __slots__ = ("t", "tokens")

    def __init__(self, t: float, tokens: int) -> None:
        self.t, self.tokens = t, tokens


class MinuteLimits:
    def __init__(
        self,
        requests: int | None,
        tokens: int | None,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.requests, self.tokens, self.window_s, self.clock = requests, tokens, window_s, clock
        self._log: list[_Entry] = []
        self._lock = threading.Lock()

    def wait_s(self, tokens: int, now: float) -> float:
        """Seconds from `now` until a call of `tokens` fits the window (0.0: it fits now)."""
        log = [e for e in self._log if e.t > now - self.window_s]
        self._log = log
        until = now
        if self.requests is not None and len(log) >= self.requests:
            until = max(until, log[len(log) - self.requests].t + self.window_s)  # the oldest that must expire
        if self.tokens is not None and log:
            excess = sum(e.tokens for e in log) + min(tokens, self.tokens) - self.tokens
            for entry in log:  # oldest first: expire entries until the excess is gone
                if excess <= 0:
                    break
                excess -= entry.tokens
                until = max(until, entry.t + self.window_s)
        return until - now

    async def acquire(self, tokens: int) -> tuple[_Entry, float]:
        """Wait until the call fits, then log it; (its entry for `settle`, seconds waited)."""
        start = self.clock()
        while True:
            with self._lock:
                now = self.clock()
                wait = self.wait_s(tokens, now)
                if wait <= 0:
                    entry = _Entry(now, tokens)
                    self._log.append(entry)
                    return entry, now - start
            await asyncio.sleep(wait)

    def settle(self, entry: _Entry, tokens: int) -> None:
        """The call's real token count, once its reply is in (a failed call keeps its estimate)."""
        with self._lock:
            entry.tokens = tokens
