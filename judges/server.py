"""Serve any judge as an OpenAI-compatible chat model.

    python -m judges.server --judge rubric --port 8000
    python -m judges.server --judge mypkg.judges:MyJudge --judge-args '{"strict": true}' --port 0

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /stats`` (request counts, JSON),
``GET /health``. The server answers the LLM judge's own prompt format (``judges/templates``): it
parses the target style, candidate styles, topic, writing prompt and the quoted response back out
of the user message (the last user message in the template's format, so the LLM judge's repair
turn works too), runs the wrapped judge and replies with the JSON verdict
``{"quality": 0|1, "style": "...", "reason": "..."}`` as the assistant message, with ``usage``.
A message in no known format gets HTTP 400.

Binds 127.0.0.1 unless ``--host`` says otherwise. ``--token-env NAME``: requests must carry
``Authorization: Bearer <value of $NAME>`` (the token is never printed). Fault injection for tests
and drills, from one seeded generator: ``--error-rate`` (HTTP 500), ``--malformed-rate`` (a reply
that is not the JSON verdict), ``--latency-ms`` (added to every chat request), ``--rate-limit R``
(requests/s, token bucket with a burst of max(1, R); excess requests get 429 with ``Retry-After``
in whole seconds). Startup prints one line with the bound address (``--port 0`` picks a free one):
``judges.server listening on http://127.0.0.1:PORT/v1 ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import math
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python judges/server.py` from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from judges.template import TEMPLATE_DIR, TemplateError, load_template  # noqa: E402
from testbed import registry  # noqa: E402
from testbed.judge_adapter import as_judge  # noqa: E402
from testbed.types import JudgeRequest, Verdict  # noqa: E402

_TOKEN_RX = re.compile(r"\w+|[^\w\s]")
_TAG_RX = re.compile(r"\[template (\w+)\]")
MALFORMED_REPLIES = (
    "I think this piece is rather nice, overall.",
    '{"quality": 1, "sty',
    "",
    '```json\n{"verdict": "good"}\n```',
)


def count_tokens(text: str) -> int:
    """A rough token count (words and punctuation marks) for `usage`."""
    return len(_TOKEN_RX.findall(text))


class JudgeService:
    """Everything but HTTP: the wrapped judge, fault injection, rate limit and counters.
    Thread-safe; one instance serves all handler threads."""

    def __init__(self, judge: Any, *, model_name: str = "testbed-judge", token: str | None = None,
                 error_rate: float = 0.0, malformed_rate: float = 0.0, latency_ms: float = 0.0,
                 rate_limit: float | None = None, seed: int = 0) -> None:
        for name, rate in (("error_rate", error_rate), ("malformed_rate", malformed_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate}")
        if rate_limit is not None and rate_limit <= 0:
            raise ValueError(f"rate_limit must be > 0 requests/s, got {rate_limit}")
        self.model_name = model_name
        self._token = token
        self.error_rate, self.malformed_rate = error_rate, malformed_rate
        self.latency_s = max(0.0, latency_ms) / 1000.0
        self.rate_limit = rate_limit
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._bucket = max(1.0, rate_limit or 1.0)
        self._bucket_t = time.monotonic()
        self.counts: dict[str, int] = dict.fromkeys(
            ("requests", "chat_completions", "models", "ok", "injected_errors", "malformed", "rate_limited",
             "unauthorized", "bad_request", "judge_errors", "prompt_tokens", "completion_tokens"), 0)
        self._started = time.time()
        # A judge with a plain `score(req)` is called on the handler thread; anything else runs on
        # a private event loop through the Judge protocol.
        score = getattr(judge, "score", None)
        self._score = score if callable(score) and not asyncio.iscoroutinefunction(score) else None
        self._judge = as_judge(judge)
        self._loop: asyncio.AbstractEventLoop | None = None
        if self._score is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="judge-loop", daemon=True).start()

    # -- counters ------------------------------------------------------------------------------
    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.counts)
        out.update(model=self.model_name, uptime_s=round(time.time() - self._started, 3))
        return out

    # -- checks --------------------------------------------------------------------------------
    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, value = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self._token.encode())

    def take_token(self) -> float:
        """0.0 if the request may go on, else the seconds until the bucket has a token again."""
        if self.rate_limit is None:
            return 0.0
        with self._lock:
            now = time.monotonic()
            cap = max(1.0, self.rate_limit)
            self._bucket = min(cap, self._bucket + (now - self._bucket_t) * self.rate_limit)
            self._bucket_t = now
            if self._bucket >= 1.0:
                self._bucket -= 1.0
                return 0.0
            return (1.0 - self._bucket) / self.rate_limit

    def draw(self) -> tuple[bool, bool, int]:
        """(inject an error, reply malformed, which malformed reply), from the seeded generator."""
        with self._lock:
            return (self._rng.random() < self.error_rate, self._rng.random() < self.malformed_rate,
                    self._rng.randrange(len(MALFORMED_REPLIES)))

    # -- judging -------------------------------------------------------------------------------
    def request_from_messages(self, messages: Any) -> JudgeRequest:
        if not isinstance(messages, list) or not messages:
            raise TemplateError("'messages' must be a non-empty list")
        problems = []
        for msg in reversed(messages):  # the last user message in a known format
            if not isinstance(msg, dict) or msg.get("role") != "user":
                continue
            content = msg.get("content")
            if isinstance(content, list):  # OpenAI content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                continue
            tag = _TAG_RX.search(content)
            if tag is None:
                continue
            try:
                return load_template(tag.group(1)).parse_request(content)
            except TemplateError as exc:
                problems.append(str(exc))
        known = ", ".join(sorted(p.stem for p in TEMPLATE_DIR.glob("*.txt")))
        raise TemplateError(problems[0] if problems else f"no user message in a judge prompt format ({known})")

    def verdict(self, req: JudgeRequest, timeout_s: float = 300.0) -> Verdict:
        if self._score is not None:
            return self._score(req)
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self._judge.judge([req]), self._loop)
        return fut.result(timeout=timeout_s)[0]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    disable_nagle_algorithm = True  # or every small reply waits ~40 ms for a delayed ACK
    server_version = "testbed-judge-server/1"
    service: JudgeService  # set on the subclass made by make_server
    verbose = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if self.verbose:
            sys.stderr.write("judges.server: " + (format % args) + "\n")

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}, headers)

    def do_GET(self) -> None:  # noqa: N802
        svc = self.service
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/stats":
            return self._send(200, svc.stats())
        if path == "/health":
            return self._send(200, {"status": "ok"})
        svc.count("requests")
        if path in ("/v1/models", "/models"):
            svc.count("models")
            if not svc.authorized(self.headers.get("Authorization")):
                svc.count("unauthorized")
                return self._error(401, "invalid or missing bearer token", "authentication_error")
            return self._send(200, {"object": "list", "data": [
                {"id": svc.model_name, "object": "model", "created": int(svc._started), "owned_by": "testbed"}]})
        svc.count("bad_request")
        self._error(404, f"no route GET {path}", "invalid_request_error")

    def do_POST(self) -> None:  # noqa: N802
        svc = self.service
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        svc.count("requests")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            svc.count("bad_request")
            return self._error(404, f"no route POST {path}", "invalid_request_error")
        svc.count("chat_completions")
        if not svc.authorized(self.headers.get("Authorization")):
            svc.count("unauthorized")
            return self._error(401, "invalid or missing bearer token", "authentication_error")
        wait = svc.take_token()
        if wait > 0:
            svc.count("rate_limited")
            return self._error(429, "rate limit exceeded", "rate_limit_error",
                               {"Retry-After": str(max(1, math.ceil(wait)))})
        if svc.latency_s:
            time.sleep(svc.latency_s)
        inject_error, malformed, which = svc.draw()
        if inject_error:
            svc.count("injected_errors")
            return self._error(500, "injected server error", "server_error")
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            if body.get("stream"):
                raise ValueError("streaming is not supported")
            req = svc.request_from_messages(body.get("messages"))
        except (ValueError, TemplateError) as exc:
            svc.count("bad_request")
            return self._error(400, str(exc), "invalid_request_error")
        try:
            v = svc.verdict(req)
        except Exception as exc:  # noqa: BLE001 - reported to the client as a server error
            v = Verdict.failed(f"{type(exc).__name__}: {exc}")
        if v.error is not None:
            svc.count("judge_errors")
            return self._error(500, f"judge error: {v.error}", "server_error")
        if malformed:
            svc.count("malformed")
            content = MALFORMED_REPLIES[which]
        else:
            svc.count("ok")
            content = json.dumps({"quality": int(v.quality), "style": v.style or "plain", "reason": v.raw[:300]})
        prompt_tokens = sum(count_tokens(m.get("content") or "") for m in body.get("messages", [])
                            if isinstance(m, dict) and isinstance(m.get("content"), str))
        completion_tokens = count_tokens(content)
        svc.count("prompt_tokens", prompt_tokens)
        svc.count("completion_tokens", completion_tokens)
        self._send(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or svc.model_name),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        })


class JudgeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a burst of new keep-alive connections must not overflow the backlog


def make_server(service: JudgeService, host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> JudgeHTTPServer:
    handler = type("Handler", (_Handler,), {"service": service, "verbose": verbose})
    return JudgeHTTPServer((host, port), handler)


def build_judge(name: str, args: dict[str, Any] | None = None) -> Any:
    """A judge instance from a registry name or an import path ("pkg.mod:Name")."""
    return registry.load("judge", name)(**(args or {}))


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m judges.server", description=__doc__.splitlines()[0])
    ap.add_argument("--judge", default="rubric", help="registry name or import path 'pkg.mod:Name' (default: rubric)")
    ap.add_argument("--judge-args", default="{}", help="JSON object of constructor arguments for the judge")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed at startup)")
    ap.add_argument("--model-name", default=None, help="the model id /v1/models lists (default testbed-<judge>)")
    ap.add_argument("--token-env", default=None, help="env var holding the bearer token clients must send")
    ap.add_argument("--error-rate", type=float, default=0.0, help="share of chat requests answered with HTTP 500")
    ap.add_argument("--malformed-rate", type=float, default=0.0, help="share of replies that are not the JSON verdict")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="added latency per chat request")
    ap.add_argument("--rate-limit", type=float, default=None, help="requests/s; excess gets 429 + Retry-After")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault-injection generator")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    ap.add_argument("--exit-with-parent", action="store_true",
                    help="exit when the process that started this server dies (no orphans)")
    a = ap.parse_args(argv)

    try:
        judge_args = json.loads(a.judge_args)
        if not isinstance(judge_args, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        ap.error(f"--judge-args: {exc}")
    token = None
    if a.token_env:
        token = os.environ.get(a.token_env)
        if not token:
            ap.error(f"--token-env {a.token_env}: the environment variable is not set or empty")
    try:
        judge = build_judge(a.judge, judge_args)
    except (registry.RegistryError, TypeError, ValueError) as exc:
        ap.error(f"--judge {a.judge}: {exc}")
    model_name = a.model_name or f"testbed-{a.judge.rsplit(':', 1)[-1].lower()}"
    service = JudgeService(judge, model_name=model_name, token=token, error_rate=a.error_rate,
                           malformed_rate=a.malformed_rate, latency_ms=a.latency_ms, rate_limit=a.rate_limit,
                           seed=a.seed)
    server = make_server(service, a.host, a.port, a.verbose)
    host, port = server.server_address[:2]
    signal.signal(signal.SIGTERM, _interrupt)
    if a.exit_with_parent:
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(0)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    print(f"judges.server listening on http://{host}:{port}/v1 model={model_name} judge={a.judge}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
