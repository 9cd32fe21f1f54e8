"""`as_judge(obj)`: turn a user's judge, in any of the accepted shapes, into a `Judge`.

Accepted (checked in this order):

1. an object with an ``async def judge(requests: list[JudgeRequest]) -> list[Verdict]`` method:
   returned unchanged (it already is a Judge; its ``stats()`` and ``close()`` stay reachable);
2. an object with a plain (sync) ``judge(requests) -> list[...]`` method;
3. an object with a ``score(request) -> ...`` method, sync or async (one request at a time);
4. a plain callable ``f(request) -> ...``, sync or async (a function, a lambda, a bound method,
   an object with ``__call__``).

"Async" means the call returns an awaitable (an ``async def`` or anything returning a coroutine).

Each per-request result may be:

* a ``Verdict`` (used as is);
* a ``dict`` with ``quality`` (0/1 or bool) and ``style`` (str or None), optionally
  ``style_match`` (default: ``style == request.target_style``), ``raw`` / ``reason`` (text kept in
  ``Verdict.raw``), ``error`` (a judge failure: the episode is excluded and counted, not scored 0);
* a tuple/list ``(quality, style)``.

Anything else raises ``TypeError`` naming the judge and what it returned: a wrong return type is a
bug to fix, not a judge failure. An *exception raised by the user's judge* while scoring is either:

* an outage (`is_outage`: timeouts, connection errors, HTTP 429 / 5xx, by the exception's class
  names or status code, so no client library is imported): that request (or, for a batch
  ``judge``, the whole batch) gets ``Verdict.failed(...)`` and counts against the run's failure
  budget; or
* a bug: raised before the judge ever returned a verdict, or the same exception type
  `BUG_REPEATS` calls in a row: `JudgePluginError` stops the run with the judge's traceback (the
  CLI exits 2), instead of 512 "failed" calls later. Other exceptions are failures as above.

Per-request shapes (3, 4) that are async are awaited concurrently, at most `concurrency` at a
time (the object's ``concurrency`` attribute, else `DEFAULT_CONCURRENCY`).
Passing a class instead of an instance, or an object with none of the shapes above, raises
``TypeError`` at once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

from testbed.protocols import Judge
from testbed.types import JudgeRequest, Verdict


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def coerce_verdict(result: Any, req: JudgeRequest, who: str = "judge", latency_s: float = 0.0) -> Verdict:
    """One judge result (Verdict, dict or (quality, style)) -> a Verdict; TypeError otherwise."""
    if isinstance(result, Verdict):
        return result
    if isinstance(result, dict):
        if result.get("error"):
            return Verdict.failed(str(result["error"]), latency_s)
        if "quality" not in result or "style" not in result:
            raise TypeError(f"{who} returned a dict without 'quality' and 'style': {sorted(result)}")
        quality, style = result["quality"], result["style"]
        raw = result.get("raw", result.get("reason", ""))
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        (quality, style), raw = result, ""
    else:
        raise TypeError(
            f"{who} returned {type(result).__name__}; expected a Verdict, a dict with "
            "'quality' and 'style', or a (quality, style) tuple"
        )
    if isinstance(quality, bool):
        quality = int(quality)
    if quality not in (0, 1) or isinstance(quality, str):
        raise TypeError(f"{who} returned quality={quality!r}; expected 0 or 1")
    if style is not None and not isinstance(style, str):
        raise TypeError(f"{who} returned style={style!r}; expected a string or None")
    match = result.get("style_match") if isinstance(result, dict) else None
    style_match = int(style == req.target_style) if match is None else int(bool(match))
    return Verdict(
        quality=int(quality),
        style_match=style_match,
        style=style,
        raw=str(raw) if raw is not None else "",
        latency_s=latency_s,
    )


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


DEFAULT_CONCURRENCY = 32  # async per-request judges awaited at once, unless the judge says otherwise
BUG_REPEATS = 8  # the same exception type this many calls in a row is a bug, not an outage
# exception class names (anywhere in the MRO) that mean the service is down or slow, not a bug:
# openai's, httpx's, requests' and litellm's, matched by name so that none of them is imported
OUTAGE_NAMES = frozenset(
    {
        "TimeoutError",
        "ConnectionError",
        "APIConnectionError",
        "APITimeoutError",
        "InternalServerError",
        "ServiceUnavailableError",
        "RateLimitError",
        "TimeoutException",
        "NetworkError",
        "ConnectError",
        "ReadTimeout",
        "ConnectTimeout",
        "RemoteProtocolError",
        "Timeout",
        "APIError",
    }
)


class JudgePluginError(RuntimeError):
    """A judge plugin raised what looks like a bug, not an outage: the run stops with its traceback."""


def is_outage(exc: BaseException) -> bool:
    """Whether an exception from a judge means the service is unavailable (retry later) rather
    than a bug in the judge: a timeout or connection error, or an HTTP status 429 or >= 500."""
    if any(cls.__name__ in OUTAGE_NAMES for cls in type(exc).__mro__):
        return True
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


class _AdaptedJudge:
    """The Judge wrapper `as_judge` returns for shapes 2-4."""

    def __init__(self, target: Any, fn: Callable[..., Any], batch: bool, who: str) -> None:
        self.wrapped = target
        self._fn = fn
        self._batch = batch
        self._who = who
        self._judged = 0  # verdicts returned so far
        self._repeats: tuple[type | None, int] = (None, 0)  # the last exception type and its run length
        self._concurrency = max(1, int(getattr(target, "concurrency", DEFAULT_CONCURRENCY) or 1))

    def _failed(self, exc: Exception, dt: float) -> Verdict:
        """A failed verdict for an outage; `JudgePluginError` for what looks like a bug."""
        kind, run = self._repeats
        run = run + 1 if type(exc) is kind else 1
        self._repeats = (type(exc), run)
        if not is_outage(exc) and (self._judged == 0 or run >= BUG_REPEATS):
            when = "before it returned any verdict" if self._judged == 0 else f"{run} calls in a row"
            raise JudgePluginError(
                f"{self._who} raised {type(exc).__name__} {when}: a bug in the judge, not an "
                f"outage ({exc!r}); its traceback is above"
            ) from exc
        return Verdict.failed(f"{self._who} raised {exc!r}", dt)

    def _ok(self) -> None:
        self._judged += 1
        self._repeats = (None, 0)

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        requests = list(requests)
        if self._batch:
            t0 = time.perf_counter()
            try:
                results = await _maybe_await(self._fn(requests))
            except Exception as exc:  # every episode of the batch is excluded (or the run stops: a bug)
                verdict = self._failed(exc, time.perf_counter() - t0)
                return [verdict for _ in requests]
            dt = (time.perf_counter() - t0) / max(1, len(requests))
            results = list(results)
            if len(results) != len(requests):
                raise TypeError(f"{self._who} returned {len(results)} results for {len(requests)} requests")
            self._ok()
            return [coerce_verdict(r, q, self._who, dt) for r, q in zip(results, requests)]
        # a semaphore per call: a judge is shared by envs that each run their own event loop
        limit = asyncio.Semaphore(self._concurrency)
        return list(await asyncio.gather(*(self._one(req, limit) for req in requests)))

    async def _one(self, req: JudgeRequest, limit: asyncio.Semaphore) -> Verdict:
        """One request through a per-request judge; async ones run side by side up to the limit."""
        async with limit:
            t0 = time.perf_counter()
            try:
                result = await _maybe_await(self._fn(req))
            except Exception as exc:
                return self._failed(exc, time.perf_counter() - t0)
            self._ok()
            return coerce_verdict(result, req, self._who, time.perf_counter() - t0)

    def stats(self) -> dict[str, float]:
        fn = getattr(self.wrapped, "stats", None)
        return dict(fn()) if callable(fn) else {}

    def close(self) -> None:
        fn = getattr(self.wrapped, "close", None)
        if callable(fn):
            fn()

    def __repr__(self) -> str:
        return f"as_judge({self._who})"


def as_judge(obj: Any) -> Judge:
    """A Judge for `obj` (see the module doc for the accepted shapes); TypeError otherwise."""
    if obj is None:
        raise TypeError("as_judge(None): expected a judge object or a callable")
    if isinstance(obj, type):
        raise TypeError(
            f"as_judge got the class {obj.__qualname__}; pass an instance (e.g. {obj.__qualname__}(**args))"
        )
    if isinstance(obj, _AdaptedJudge):
        return obj
    method = getattr(obj, "judge", None)
    if method is not None:
        if not callable(method):
            raise TypeError(f"{_name(obj)}.judge is not callable")
        if inspect.iscoroutinefunction(method):
            return obj
        return _AdaptedJudge(obj, method, batch=True, who=f"{_name(obj)}.judge")
    score = getattr(obj, "score", None)
    if score is not None:
        if not callable(score):
            raise TypeError(f"{_name(obj)}.score is not callable")
        return _AdaptedJudge(obj, score, batch=False, who=f"{_name(obj)}.score")
    if callable(obj):
        return _AdaptedJudge(obj, obj, batch=False, who=_name(obj))
    raise TypeError(
        f"{type(obj).__qualname__} is not a judge: expected an object with judge(requests) (sync or async) "
        "or score(request), or a callable f(request) -> Verdict | dict | (quality, style)"
    )
