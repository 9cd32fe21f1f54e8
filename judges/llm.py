"""The LLM judge: any chat model LiteLLM can reach (GLM-4.7 on an OpenAI-compatible endpoint, a
provider route LiteLLM knows, or the local `judges.server`) scores each response.

Scenario::

    judge:
      name: llm
      args:
        model: openai/glm-4.7            # LiteLLM model string; "openai/..." = any OpenAI-compatible API
        api_base: https://YOUR-GLM-ENDPOINT/v1
        api_key_env: GLM_API_KEY          # the key is read from this env var; never logged or stored
        concurrency: 16

or, fully offline, let the judge start a local server wrapping another judge::

        local_server: {judge: rubric}     # runs `python -m judges.server --port 0`, stops it at exit

How one request is judged: the cache (judges/cache.py) is asked first; on a miss the versioned
prompt template (judges/templates/<template>.txt, see judges/template.py) is rendered with a fresh
nonce, sent with temperature 0, and the reply parsed (code fences, prose, any case). A reply that
cannot be parsed gets ONE repair turn ("reply again with only the JSON"). Each HTTP call has a
timeout; timeouts, 429 and 5xx (and connection errors) are retried up to `max_retries` times with
exponential backoff and full jitter, waiting at least the server's Retry-After. After the last
retry, or on any other error (401, 400, a second unparseable reply), the verdict carries the error:
the loop excludes the episode and counts it; it is never scored 0. Identical requests within a
batch share one call. style_match is computed here (judged style == target), never taken from the
model.

All calls run on the judge's own event loop in a background thread, so `judge()` can be awaited
from any loop (the env uses a fresh `asyncio.run` per step) and the concurrency limit holds
across callers. `stats()` gives cumulative counters (see its doc); `close()` stops the local
server and the thread (also done at interpreter exit).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import queue
import random
import subprocess
import sys
import threading
import time
import weakref
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from judges.cache import VerdictCache, cache_key
from judges.template import REPAIR_MESSAGE, VerdictParseError, load_template, parse_verdict
from testbed.types import JudgeRequest, Verdict

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of the price map

_RETRYABLE_STATUS = {408, 409, 425, 429}
_REPO_ROOT = Path(__file__).resolve().parents[1]
_LOCAL_SERVER_KEYS = {"judge", "args", "error_rate", "malformed_rate", "latency_ms", "rate_limit", "seed",
                      "token_env", "startup_timeout_s", "verbose"}


def _litellm() -> Any:
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on every error
    litellm.telemetry = False
    return litellm


def _register_free_model(litellm: Any, model: str) -> None:
    provider, _, name = model.partition("/")
    if not name:
        provider, name = "openai", model
    logger = logging.getLogger("LiteLLM")
    level = logger.level
    logger.setLevel(logging.ERROR)  # register_model warns that a zero price has no cache prices
    try:
        litellm.register_model({name: {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                                       "litellm_provider": provider, "mode": "chat"}})
    finally:
        logger.setLevel(level)


class _CallFailed(Exception):
    pass


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _retry_after_s(exc: BaseException) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header on a LiteLLM/OpenAI error, if any."""
    for headers in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None)):
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
            except ValueError:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError, AttributeError):
            continue
    return None


class LocalJudgeServer:
    """`python -m judges.server --port 0 ...` as a child process; the bound port read from its stdout.

    `spec` keys: judge (name or import path, default rubric), args (dict), error_rate,
    malformed_rate, latency_ms, rate_limit, seed, token_env, startup_timeout_s, verbose.
    `wait=False` returns at once (start several, then `wait_ready()` each)."""

    def __init__(self, spec: dict[str, Any] | None = None, wait: bool = True) -> None:
        spec = dict(spec or {})
        unknown = set(spec) - _LOCAL_SERVER_KEYS
        if unknown:
            raise ValueError(f"local_server: unknown keys {sorted(unknown)} (known: {sorted(_LOCAL_SERVER_KEYS)})")
        self.spec = spec
        cmd = [sys.executable, "-m", "judges.server", "--port", "0", "--host", "127.0.0.1",
               "--judge", str(spec.get("judge", "rubric")), "--judge-args", json.dumps(spec.get("args", {}))]
        for key in ("error_rate", "malformed_rate", "latency_ms", "rate_limit", "seed", "token_env"):
            if spec.get(key) is not None:
                cmd += [f"--{key.replace('_', '-')}", str(spec[key])]
        if spec.get("verbose"):
            cmd.append("--verbose")
        cmd.append("--exit-with-parent")  # never outlive a killed run
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True,
                                     cwd=str(_REPO_ROOT))
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._deadline = time.monotonic() + float(spec.get("startup_timeout_s", 60.0))
        self.api_base: str | None = None

        def drain() -> None:  # keep reading, so the child never blocks on a full pipe
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.put(line)
            self._lines.put(None)

        threading.Thread(target=drain, name="judge-server-stdout", daemon=True).start()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> str:
        """Block until the server printed its address; returns api_base ("http://127.0.0.1:PORT/v1")."""
        while self.api_base is None:
            try:
                line = self._lines.get(timeout=max(0.01, self._deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError("local judge server did not start in time") from None
            if line is None:
                self.stop()
                raise RuntimeError(f"local judge server exited at startup (code {self.proc.poll()}); see its stderr")
            if "listening on " in line:
                self.api_base = line.split("listening on ", 1)[1].split()[0]
        return self.api_base

    @property
    def base_url(self) -> str:
        return self.wait_ready().removesuffix("/v1")

    def stats(self) -> dict[str, Any]:
        """The server's GET /stats (request counts)."""
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        with opener.open(self.base_url + "/stats", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        _stop_process(self.proc)

    def __enter__(self) -> LocalJudgeServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _shutdown(loop: asyncio.AbstractEventLoop, thread: threading.Thread, server: LocalJudgeServer | None,
              cache: VerdictCache | None) -> None:
    if server is not None:
        server.stop()

    async def cancel_all() -> None:  # e.g. LiteLLM's logging worker: end its tasks cleanly
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    if loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5)
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
    if not loop.is_running() and not loop.is_closed():
        loop.close()
    if cache is not None:
        cache.close()


class LLMJudge:
    """Judge through LiteLLM. Arguments (all optional):

    model              LiteLLM model string (default "openai/glm-4.7")
    api_base           the endpoint, e.g. "https://host/v1" (None: the provider's default)
    api_key_env        name of the env var holding the API key (required to be set if given)
    local_server       dict: start `judges.server` as a subprocess and use it as api_base; keys:
                       judge (name or import path, default rubric), args, error_rate, malformed_rate,
                       latency_ms, rate_limit, seed, token_env, startup_timeout_s, verbose
    template           prompt template name in judges/templates (default "style_judge_v1")
    concurrency        HTTP calls in flight at most (default 16)
    timeout_s          per HTTP call (default 60)
    max_retries        re-attempts after a timeout / 429 / 5xx / connection error (default 4)
    backoff_base_s, backoff_max_s   exponential backoff with full jitter (0.5, 20)
    max_retry_after_s  a Retry-After longer than this fails the call instead of waiting (120)
    max_tokens, temperature         sampling (1024, 0.0); reasoning models need room to think
    cache, cache_path  SQLite verdict cache on/off and its file (default $TESTBED_CACHE or
                       ~/.cache/testbed, file judge_cache.sqlite)
    cache_namespace    extra cache-key text (default: the local server's judge spec, else "")
    input_cost_per_token, output_cost_per_token   prices for models LiteLLM has no price for
    extra_params       extra keyword arguments for litellm.acompletion (e.g. extra_body)
    seed               seed of the backoff jitter
    """

    def __init__(
        self,
        model: str = "openai/glm-4.7",
        api_base: str | None = None,
        api_key_env: str | None = None,
        local_server: dict[str, Any] | None = None,
        template: str = "style_judge_v1",
        concurrency: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_retry_after_s: float = 120.0,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        cache: bool = True,
        cache_path: str | None = None,
        cache_namespace: str | None = None,
        input_cost_per_token: float | None = None,
        output_cost_per_token: float | None = None,
        extra_params: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ValueError("need concurrency >= 1, max_retries >= 0 and timeout_s > 0")
        if local_server is not None and api_base is not None:
            raise ValueError("give either api_base or local_server, not both")
        self.model = model
        self.template = load_template(template)
        self.concurrency = concurrency
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_base_s, self.backoff_max_s = float(backoff_base_s), float(backoff_max_s)
        self.max_retry_after_s = float(max_retry_after_s)
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self.extra_params = dict(extra_params or {})
        self.input_cost_per_token, self.output_cost_per_token = input_cost_per_token, output_cost_per_token
        self._rng = random.Random(seed)

        if local_server is not None:
            local_server = dict(local_server)
            api_key_env = api_key_env or local_server.get("token_env")
        self._api_key: str | None = None
        if api_key_env:
            self._api_key = os.environ.get(api_key_env) or None
            if self._api_key is None:
                raise ValueError(f"api_key_env: the environment variable {api_key_env} is not set or empty")
        self.api_key_env = api_key_env
        if self._api_key is None and (api_base or local_server is not None) and model.startswith("openai/"):
            self._api_key = "no-key"  # the OpenAI client insists on one; keyless endpoints ignore it

        self._litellm = _litellm()
        self._server = LocalJudgeServer(local_server) if local_server is not None else None
        try:
            self._setup(model, api_base, local_server, cache, cache_path, cache_namespace)
        except BaseException:
            if self._server is not None:
                self._server.stop()
            raise

    def _setup(self, model: str, api_base: str | None, local_server: dict[str, Any] | None, cache: bool,
               cache_path: str | None, cache_namespace: str | None) -> None:
        if self._server is not None:
            _register_free_model(self._litellm, model)  # a local judge costs nothing; also spares
            # LiteLLM a slow failed price lookup on every call
        self.api_base = self._server.api_base if self._server else api_base
        if cache_namespace is None:
            cache_namespace = "" if local_server is None else "local:" + json.dumps(
                {"judge": local_server.get("judge", "rubric"), "args": local_server.get("args", {})}, sort_keys=True)
        self.cache_namespace = cache_namespace
        self._key_model = f"{model}|{cache_namespace}" if cache_namespace else model
        self._cache = VerdictCache(cache_path) if cache else None

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llm-judge-loop", daemon=True)
        self._thread.start()
        self._sem: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._counts: dict[str, float] = dict.fromkeys(
            ("requests", "cache_hits", "deduplicated", "judged", "failures", "calls", "retries", "repairs",
             "timeouts", "rate_limited", "server_errors", "unparseable", "prompt_tokens", "completion_tokens",
             "cost_usd", "cost_unknown_calls", "retry_wait_s"), 0.0)
        self._latencies: list[float] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._thread, self._server, self._cache)

    # -- the Judge protocol ----------------------------------------------------------------------
    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        if not self._finalizer.alive:
            raise RuntimeError("LLMJudge is closed")
        fut = asyncio.run_coroutine_threadsafe(self._judge_all(list(requests)), self._loop)
        return await asyncio.wrap_future(fut)

    def judge_sync(self, requests: list[JudgeRequest]) -> list[Verdict]:
        """The same as `judge`, for code that has no event loop."""
        return asyncio.run_coroutine_threadsafe(self._judge_all(list(requests)), self._loop).result()

    def close(self) -> None:
        """Stop the local server (if any) and the judge's thread; idempotent."""
        self._finalizer()

    def __enter__(self) -> LLMJudge:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- accounting ------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Cumulative counters, flat keys prefixed `judge_`:

        judge_requests        verdicts asked for
        judge_cache_hits      served from the SQLite cache (no call)
        judge_judged          fresh verdicts without an error
        judge_failures        verdicts carrying an error (the episode is excluded, not scored 0)
                              requests == cache_hits + judged + failures
        judge_deduplicated    of judged + failures: copies of an identical request in the same batch
        judge_calls           HTTP calls made (first attempts + retries + repairs):
                              calls == judged + failures - deduplicated + retries + repairs
        judge_retries         re-attempts after a timeout / 429 / 5xx / connection error
        judge_repairs         repair turns after an unparseable reply
        judge_timeouts, judge_rate_limited, judge_server_errors   failed calls by kind
        judge_unparseable     verdicts that failed because the reply stayed unparseable
        judge_retry_wait_s    seconds spent waiting between retries
        judge_prompt_tokens, judge_completion_tokens   from the replies' `usage`
        judge_cost_usd        where LiteLLM (or the given per-token prices) knows the price
        judge_cost_unknown_calls   successful calls with no known price
        judge_latency_{mean,p50,p90,p99}_s   per fresh verdict, from its first call to the verdict
                              (retries, backoff and repair included; waiting for a slot is not)
        """
        with self._lock:
            out = {f"judge_{k}": float(v) for k, v in self._counts.items()}
            lat = sorted(self._latencies)
        out["judge_latency_mean_s"] = sum(lat) / len(lat) if lat else 0.0
        for q in (50, 90, 99):
            out[f"judge_latency_p{q}_s"] = _percentile(lat, q / 100)
        return out

    def _add(self, key: str, n: float = 1.0) -> None:
        with self._lock:
            self._counts[key] += n

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key != "no-key" and text:
            text = text.replace(self._api_key, "[redacted]")
        return text

    # -- the work (on the judge's own loop) ------------------------------------------------------
    def _key(self, req: JudgeRequest) -> str:
        return cache_key(self._key_model, self.template.version, req.prompt, req.response, req.target_style,
                         req.candidate_styles, req.topic)

    async def _judge_all(self, requests: list[JudgeRequest]) -> list[Verdict]:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.concurrency)
        self._add("requests", len(requests))
        keys = [self._key(r) for r in requests]
        cached: dict[str, dict[str, Any]] = {}
        if self._cache is not None and keys:
            try:
                cached = self._cache.get_many(keys)
            except Exception:  # noqa: BLE001 - a broken cache must not stop judging
                cached = {}
        out: list[Verdict | None] = [None] * len(requests)
        leaders: dict[str, int] = {}
        followers: dict[str, list[int]] = {}
        for i, (req, key) in enumerate(zip(requests, keys)):
            hit = cached.get(key)
            if hit is not None:
                out[i] = Verdict(quality=int(hit["quality"]), style_match=int(hit["style"] == req.target_style),
                                 style=hit["style"], raw=hit.get("raw", ""), latency_s=0.0)
            elif key in leaders:
                followers.setdefault(key, []).append(i)
            else:
                leaders[key] = i
        self._add("cache_hits", len(requests) - len(leaders) - sum(map(len, followers.values())))

        async def run(key: str, i: int) -> None:
            verdict = await self._judge_one(requests[i], key)
            out[i] = verdict
            for j in followers.get(key, []):
                out[j] = verdict  # same key: same prompt, response, target and candidates
            n = 1 + len(followers.get(key, []))
            self._add("failures" if verdict.error else "judged", n)
            self._add("deduplicated", n - 1)

        await asyncio.gather(*(run(k, i) for k, i in leaders.items()))
        return [v if v is not None else Verdict.failed("internal: no verdict") for v in out]

    async def _judge_one(self, req: JudgeRequest, key: str) -> Verdict:
        clock: list[float] = []  # set when the first call gets a concurrency slot
        elapsed = lambda: time.perf_counter() - clock[0] if clock else 0.0  # noqa: E731
        messages = self.template.render(req)
        try:
            content = await self._complete(messages, clock)
            try:
                quality, style, reason = parse_verdict(content)
            except VerdictParseError:
                self._add("repairs")
                repair = [*messages, {"role": "assistant", "content": content},
                          {"role": "user", "content": REPAIR_MESSAGE}]
                content = await self._complete(repair, clock)
                try:
                    quality, style, reason = parse_verdict(content)
                except VerdictParseError as exc:
                    self._add("unparseable")
                    return Verdict(quality=0, style_match=0, style=None, raw=self._scrub(content[:2000]),
                                   error=f"unparseable judge reply after one repair: {exc}",
                                   latency_s=elapsed())
        except _CallFailed as exc:
            return Verdict.failed(self._scrub(str(exc)), elapsed())
        latency = elapsed()
        with self._lock:
            self._latencies.append(latency)
        raw = self._scrub(content)
        if self._cache is not None:
            try:
                self._cache.put(key, {"quality": quality, "style": style, "raw": raw, "reason": reason})
            except Exception:  # noqa: BLE001 - a cache write failure loses a cache entry, not a verdict
                pass
        return Verdict(quality=quality, style_match=int(style == req.target_style), style=style, raw=raw,
                       latency_s=latency)

    async def _complete(self, messages: list[dict[str, str]], clock: list[float]) -> str:
        """One chat completion with retries; the reply text, or _CallFailed. Appends the start time
        of the first attempt to `clock` if it is empty (latency excludes queueing for a slot)."""
        assert self._sem is not None
        litellm = self._litellm
        kwargs: dict[str, Any] = dict(model=self.model, messages=messages, temperature=self.temperature,
                                      max_tokens=self.max_tokens, timeout=self.timeout_s, max_retries=0)
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        kwargs.update(self.extra_params)
        attempt = 0
        while True:
            async with self._sem:
                if not clock:
                    clock.append(time.perf_counter())
                self._add("calls")
                try:
                    resp = await asyncio.wait_for(litellm.acompletion(**kwargs), self.timeout_s * 1.5 + 1.0)
                    error, status, retry_after = None, 200, None
                except asyncio.CancelledError:
                    raise
                except (asyncio.TimeoutError, litellm.Timeout) as exc:
                    error, status, retry_after = exc, 408, None
                except Exception as exc:  # noqa: BLE001 - classified below
                    error, status, retry_after = exc, getattr(exc, "status_code", None), _retry_after_s(exc)
            if error is None:
                self._account(resp)
                try:
                    content = resp.choices[0].message.content
                except (AttributeError, IndexError):
                    content = None
                return content if isinstance(content, str) else ""
            if status == 408:
                self._add("timeouts")
            elif status == 429:
                self._add("rate_limited")
            elif isinstance(status, int) and status >= 500:
                self._add("server_errors")
            retryable = (status in _RETRYABLE_STATUS or (isinstance(status, int) and status >= 500)
                         or isinstance(error, (litellm.APIConnectionError, ConnectionError)))
            desc = f"{type(error).__name__} (HTTP {status}): {str(error)[:300]}" if status else f"{type(error).__name__}: {str(error)[:300]}"
            if not retryable:
                raise _CallFailed(f"judge call failed, not retryable: {desc}")
            if attempt >= self.max_retries:
                raise _CallFailed(f"judge call failed after {attempt + 1} attempts: {desc}")
            if retry_after is not None and retry_after > self.max_retry_after_s:
                raise _CallFailed(f"judge call failed: Retry-After {retry_after:g} s exceeds max_retry_after_s: {desc}")
            delay = min(self.backoff_max_s, self.backoff_base_s * 2**attempt) * self._rng.random()  # full jitter
            delay = max(delay, retry_after or 0.0)
            attempt += 1
            self._add("retries")
            self._add("retry_wait_s", delay)
            await asyncio.sleep(delay)

    def _account(self, resp: Any) -> None:
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        self._add("prompt_tokens", pt)
        self._add("completion_tokens", ct)
        cost = None
        if self.input_cost_per_token is not None or self.output_cost_per_token is not None:
            cost = pt * (self.input_cost_per_token or 0.0) + ct * (self.output_cost_per_token or 0.0)
        else:
            hidden = getattr(resp, "_hidden_params", None) or {}
            cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
        if isinstance(cost, (int, float)) and cost >= 0:
            self._add("cost_usd", float(cost))
        else:
            self._add("cost_unknown_calls")

    def __repr__(self) -> str:
        where = f"local server {self.api_base}" if self._server else (self.api_base or "provider default")
        return f"LLMJudge(model={self.model!r}, {where}, template={self.template.version})"
