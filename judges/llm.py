"""The LLM judge: any chat model LiteLLM can reach (GLM-4.7 through LiteLLM's `zai/` route or on an
OpenAI-compatible endpoint, or the local `judges.server`) scores each response.

Scenario::

    judge:
      type: llm
      args:
        model: zai/glm-4.7               # or openai/glm-4.7 with api_base: https://YOUR-GLM-ENDPOINT/v1
        api_key_env: ZAI_API_KEY          # the key is read from this env var; never logged or stored
        thinking: "off"                   # no chain of thought for a style verdict; json_mode: one object
        json_mode: true

or, fully offline, let the judge start a local server wrapping another judge::

        local_server: {judge: rubric}     # runs `python -m judges.server --port 0`, stops it at exit

The arguments are validated by `LLMJudgeConfig` (judges/config.py): an unknown key or a bad value
is a ValueError naming the field. How one batch is judged: the verdict cache (judges/cache.py) is
asked first, and identical requests share one call (judges/dedup.py); each remaining request
renders the versioned prompt template (judges/template.py) with a fresh nonce and is sent with
the judge's request settings (judges/request.py: temperature, max_tokens, thinking on/off, JSON
mode), within the client-side minute limits if set (judges/limits.py), retried on timeouts, rate
limits and 5xx (judges/retry.py). Only the reply's final answer is parsed (judges/reply.py: a
reasoning model's thinking is removed first). A truncated reply (finish_reason "length", or
reasoning never closed) is retried ONCE with a larger budget or thinking off; still truncated, the
request fails with an error saying "truncated". An unparseable answer gets ONE repair turn. A
refused key (401/403, a 429 with a quota code) fails the request with an error starting "judge
refused: " and latches: no later call is made, and the run stops at once (testbed.types). A
request that fails carries the error: the loop excludes the episode and counts it; it is never
scored 0. style_match is computed here (judged style == target), never taken from the model.
Texts kept are scrubbed of the API key (judges/scrub.py); counters are in judges/accounting.py.

`judge()` runs on the caller's event loop (the env keeps one loop for its lifetime, so LiteLLM's
client and its connection pool live across steps); the concurrency limit holds per loop.
`judge_sync()` is for code with no loop. `close()` stops the local server (judges/local_server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import weakref
from typing import Any

from testbed.extras import require_extra

# First: without the `llm` extra, choosing this judge says which extra to install (judges/retry.py
# imports tenacity; LiteLLM is imported on the first call, too late to say it well).
require_extra("llm", "the LLM judge (judge: llm)", ("litellm", "tenacity"))

from judges.accounting import Accounting  # noqa: E402
from judges.cache import VerdictCache, cache_key  # noqa: E402
from judges.config import LLMJudgeConfig, validate_config  # noqa: E402
from judges.dedup import plan_batch  # noqa: E402
from judges.limits import MinuteLimits, estimate_tokens  # noqa: E402
from judges.local_server import LocalJudgeServer  # noqa: E402
from judges.reply import Reply, read_reply, reasoning_tokens  # noqa: E402
from judges.request import Requests, known_output_price, register_free_model  # noqa: E402
from judges.retry import CallFailed, CallRefused, RetryPolicy, call_with_retries, classify  # noqa: E402
from judges.scrub import Scrubber  # noqa: E402
from judges.template import VerdictParseError, load_template, parse_verdict, repair_turn  # noqa: E402
from testbed.types import JUDGE_REFUSED, JudgeRequest, Verdict  # noqa: E402

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of the price map

__all__ = ["LLMJudge", "LLMJudgeConfig", "LocalJudgeServer"]


def _litellm() -> Any:
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on every error
    litellm.telemetry = False
    return litellm


def _api_key(cfg: LLMJudgeConfig) -> tuple[str | None, str | None]:
    """(the env var's name, the key): from `api_key_env`, or a local server's `token_env`. Only
    the name is ever configured; the key lives in this process's memory alone."""
    key_env = cfg.api_key_env or (cfg.local_server.token_env if cfg.local_server else None)
    key = None
    if key_env:
        key = os.environ.get(key_env) or None
        if key is None:
            raise ValueError(f"api_key_env: the environment variable {key_env} is not set or empty")
    if key is None and (cfg.api_base or cfg.local_server) and cfg.model.startswith("openai/"):
        key = "no-key"  # the OpenAI client insists on one; keyless endpoints ignore it
    return key_env, key


class _NoVerdict(Exception):
    """A reply that is not a verdict: truncated twice, or unparseable after the repair turn."""

    def __init__(self, error: str, raw: str = "") -> None:
        super().__init__(error)
        self.raw = raw


def _shutdown(server: LocalJudgeServer | None, cache: VerdictCache | None, runner: asyncio.Runner) -> None:
    runner.close()  # judge_sync's loop, if it ever ran: cancels LiteLLM's leftover tasks there
    if server is not None:
        server.stop()
    if cache is not None:
        cache.close()


class LLMJudge:
    """Judge through LiteLLM. `LLMJudge(**args)` or `LLMJudge(LLMJudgeConfig(...))`; every argument
    and its default is in `LLMJudgeConfig`."""

    Config = LLMJudgeConfig

    def __init__(self, config: LLMJudgeConfig | dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        if config is not None and kwargs:
            raise TypeError("LLMJudge: give a config or keyword arguments, not both")
        cfg: LLMJudgeConfig = validate_config(LLMJudgeConfig, kwargs if config is None else config, "llm judge args")
        self.config = cfg
        self.model = cfg.model
        self.template = load_template(cfg.template)
        self.retry = RetryPolicy(
            cfg.max_retries, cfg.backoff_base_s, cfg.backoff_max_s, cfg.max_retry_after_s, cfg.seed
        )
        self.api_key_env, self._api_key = _api_key(cfg)
        self._scrub = Scrubber(self._api_key)
        self._litellm = _litellm()
        self.requests = Requests.of(cfg, self._litellm)  # a bad json_mode fails before a server starts
        self._limits = (
            MinuteLimits(cfg.requests_per_minute, cfg.tokens_per_minute)
            if cfg.requests_per_minute or cfg.tokens_per_minute
            else None
        )
        self._refused: str | None = None  # the first refusal's message, once the provider refused the key
        self._server = LocalJudgeServer(cfg.local_server) if cfg.local_server is not None else None
        try:
            self._cache = VerdictCache(cfg.cache_path) if cfg.cache else None
        except BaseException:
            if self._server is not None:
                self._server.stop()
            raise
        if self._server is not None:
            register_free_model(self._litellm, cfg.model)
        self._count = Accounting(
            cfg.input_cost_per_token, cfg.output_cost_per_token, known_output_price(self._litellm, cfg.model)
        )
        self.api_base = self._server.api_base if self._server else cfg.api_base
        local = cfg.local_server
        self.cache_namespace = (
            cfg.cache_namespace
            if cfg.cache_namespace is not None
            else (
                ""
                if local is None
                else "local:"
                + json.dumps(
                    {"judge": local.judge, "args": local.args, **({"drill": local.drill} if local.drill else {})},
                    sort_keys=True,
                )
            )
        )
        # The verdicts' source, part of the cache key: a remote endpoint by its address; a local
        # server by what it serves (its namespace), since its port is new every run.
        self.endpoint = None if self._server is not None or cfg.api_base is None else cfg.api_base.rstrip("/")
        self._key_model = f"{cfg.model}|{self.cache_namespace}" if self.cache_namespace else cfg.model
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._sync_runner = asyncio.Runner()
        self._finalizer = weakref.finalize(self, _shutdown, self._server, self._cache, self._sync_runner)

    @property
    def concurrency(self) -> int:
        return self.config.concurrency

    # -- the Judge protocol ----------------------------------------------------------------------
    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        if not self._finalizer.alive:
            raise RuntimeError("LLMJudge is closed")
        requests = list(requests)
        self._count.add("requests", len(requests))
        keys = [self._key(r) for r in requests]
        cached: dict[str, dict[str, Any]] = {}
        if self._cache is not None and keys:
            try:
                cached = self._cache.get_many(keys)
            except Exception:  # noqa: BLE001 - a broken cache must not stop judging
                cached = {}
        plan = plan_batch(keys, cached)
        self._count.add("cache_hits", len(plan.hits))
        out: list[Verdict | None] = [None] * len(requests)
        for i, hit in plan.hits.items():
            out[i] = Verdict(
                quality=int(hit["quality"]),
                style_match=int(hit["style"] == requests[i].target_style),
                style=hit["style"],
                raw=hit.get("raw", ""),
                latency_s=0.0,
            )

        async def run(key: str, i: int) -> None:
            verdict = await self._judge_one(requests[i], key)
            copies = plan.copies(key)
            for j in (i, *copies):  # same key: same prompt, response, target and candidates
                out[j] = verdict
            self._count.add("failures" if verdict.error else "judged", 1 + len(copies))
            self._count.add("deduplicated", len(copies))

        await asyncio.gather(*(run(k, i) for k, i in plan.leaders.items()))
        return [v if v is not None else Verdict.failed("internal: no verdict") for v in out]

    def judge_sync(self, requests: list[JudgeRequest]) -> list[Verdict]:
        """The same as `judge`, for code that has no event loop (one loop of the judge's own,
        kept across calls, closed by `close()`)."""
        try:
            asyncio.get_running_loop()
            inside_a_loop = True
        except RuntimeError:
            inside_a_loop = False
        if inside_a_loop:
            raise RuntimeError("LLMJudge.judge_sync() cannot run inside a running event loop; await judge() there")
        if not self._finalizer.alive:
            raise RuntimeError("LLMJudge is closed")
        return self._sync_runner.run(self.judge(requests))

    def close(self) -> None:
        """Stop the local server (if any) and close the cache; idempotent."""
        self._finalizer()

    def __enter__(self) -> LLMJudge:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stats(self) -> dict[str, float]:
        """Cumulative counters, flat floats; names and identities in judges/accounting.py. None
        starts with `judge_` (those are the loop's own counts)."""
        return self._count.stats()

    # -- one request -------------------------------------------------------------------------------
    def _key(self, req: JudgeRequest) -> str:
        return cache_key(
            self._key_model,
            self.template.version,
            req.prompt,
            req.response,
            req.target_style,
            req.candidate_styles,
            req.topic,
            self.endpoint,
            self.requests.cache_fields(),
        )

    async def _judge_one(self, req: JudgeRequest, key: str) -> Verdict:
        clock: list[float] = []  # set when the first call is sent
        elapsed = lambda: time.perf_counter() - clock[0] if clock else 0.0  # noqa: E731
        try:
            quality, style, reason, answer = await self._ask(self.template.render(req), clock)
        except _NoVerdict as exc:
            return Verdict(
                quality=0,
                style_match=0,
                style=None,
                raw=self._scrub(exc.raw[:2000]),
                error=str(exc),
                latency_s=elapsed(),
            )
        except CallRefused as exc:
            return Verdict.failed(self._refuse(exc), elapsed())
        except CallFailed as exc:
            return Verdict.failed(self._scrub(str(exc)), elapsed())
        latency = elapsed()
        self._count.latency(latency)
        raw = self._scrub(answer)
        if self._cache is not None:
            with contextlib.suppress(Exception):  # a cache write failure loses a cache entry, not a verdict
                self._cache.put(key, {"quality": quality, "style": style, "raw": raw, "reason": reason})
        return Verdict(
            quality=quality, style_match=int(style == req.target_style), style=style, raw=raw, latency_s=latency
        )

    async def _ask(self, messages: list[dict[str, str]], clock: list[float]) -> tuple[int, str, str, str]:
        """(quality, style, reason, answer) for one rendered request: the call; the one retry
        after a truncated reply; the one repair turn after an unparseable answer (with the
        retry's settings, if there was one). _NoVerdict, CallFailed or CallRefused otherwise."""
        settings: dict[str, Any] = {}
        reply = await self._complete(messages, clock)
        if reply.truncated:
            self._count.add("truncated")
            self._count.add("truncation_retries")
            max_tokens, thinking = self.requests.retry_after_truncation()
            settings = {"max_tokens": max_tokens, "thinking": thinking}
            reply = await self._complete(messages, clock, **settings)
            if reply.truncated:
                self._count.add("truncated")
                raise _NoVerdict(self._truncated(reply, settings), reply.reasoning[-500:])
        assert reply.answer is not None
        try:
            return (*parse_verdict(reply.answer), reply.answer)
        except VerdictParseError:
            self._count.add("repairs")
        reply = await self._complete(repair_turn(messages, reply.answer), clock, **settings)
        if reply.truncated:
            self._count.add("truncated")
            raise _NoVerdict(self._truncated(reply, settings, "the repair turn's reply"), reply.reasoning[-500:])
        assert reply.answer is not None
        try:
            return (*parse_verdict(reply.answer), reply.answer)
        except VerdictParseError as exc:
            self._count.add("unparseable")
            raise _NoVerdict(f"unparseable judge reply after one repair: {exc}", reply.answer) from None

    def _truncated(self, reply: Reply, settings: dict[str, Any], what: str = "the retry's reply") -> str:
        how = "finish_reason length" if reply.finish_reason == "length" else "reasoning never closed"
        retry = f"max_tokens={settings['max_tokens']}, thinking {settings['thinking'] or 'default'}"
        return f"truncated: {what} was cut off too ({how}; retry: {retry}); raise max_tokens or set thinking: off"

    def _refuse(self, exc: CallRefused) -> str:
        """The refusal's message, latched: every later request fails with it, making no call."""
        if self._refused is None:
            whose = (
                f"the key in the environment variable {self.api_key_env}"
                if self.api_key_env
                else f"the key LiteLLM's route for {self.model} reads by default (api_key_env is not set)"
            )
            self._refused = self._scrub(
                f"{JUDGE_REFUSED}{exc.cause} for {whose}; the judge makes no more calls ({exc})"
            )
        return self._refused

    def _slot(self) -> asyncio.Semaphore:
        """This loop's concurrency limit (a semaphore belongs to one loop)."""
        loop = asyncio.get_running_loop()
        sem = self._slots.get(loop)
        if sem is None:
            sem = self._slots[loop] = asyncio.Semaphore(self.config.concurrency)
        return sem

    async def _complete(
        self,
        messages: list[dict[str, str]],
        clock: list[float],
        max_tokens: int | None = None,
        thinking: str | None = None,
    ) -> Reply:
        """One chat completion with retries; its Reply, or CallFailed (CallRefused once the provider
        refused the key: then no call is sent). Appends the time the first call is sent to `clock`
        if it is empty (latency excludes queueing for a slot and the minute limits)."""
        litellm, cfg = self._litellm, self.config
        kwargs = self.requests.kwargs(max_tokens, thinking)
        kwargs["messages"] = messages
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        tokens = estimate_tokens(messages, kwargs["max_tokens"])
        slot = self._slot()

        async def attempt() -> Any:
            async with slot:  # held for the call only, never while backing off
                if self._refused is not None:
                    self._count.add("not_sent")
                    raise CallRefused("not sent", self._refused)
                entry = None
                if self._limits is not None:
                    entry, waited = await self._limits.acquire(tokens)
                    self._count.add("throttle_wait_s", waited)
                if not clock:
                    clock.append(time.perf_counter())
                self._count.add("calls")
                try:
                    # LiteLLM's own timeout, with a hard stop above it in case a call hangs anyway.
                    resp = await asyncio.wait_for(litellm.acompletion(**kwargs), cfg.timeout_s * 1.5 + 1.0)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - classified for the retry policy
                    err = classify(exc, (litellm.Timeout,), (litellm.APIConnectionError,), cfg.refusal_codes)
                else:
                    if entry is not None and self._limits is not None:
                        self._limits.settle(entry, int(getattr(resp.usage, "total_tokens", 0) or tokens))
                    return resp
            self._count.failed_call(err.status, err.refused is not None)
            raise err

        def on_retry(wait_s: float) -> None:
            self._count.add("retries")
            self._count.add("retry_wait_s", wait_s)

        resp = await call_with_retries(attempt, self.retry, on_retry)
        self._count.usage(resp, reasoning_tokens(resp))
        return read_reply(resp)

    def __repr__(self) -> str:
        where = f"local server {self.api_base}" if self._server else (self.api_base or "provider default")
        return f"LLMJudge(model={self.model!r}, {where}, template={self.template.version})"
