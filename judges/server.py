"""Serve any judge as an OpenAI-compatible chat model (FastAPI on uvicorn).

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
``Authorization: Bearer <value of $NAME>`` (the token is never printed); it is checked before the
body is read. A body over ``--max-body-bytes`` gets 413 (from its Content-Length, before reading
it), one not received within ``--read-timeout-s`` gets 408; a malformed request of any kind gets a
4xx JSON error, never a dropped connection. Fault injection for tests and drills, from one seeded
generator: ``--error-rate`` (HTTP 500), ``--malformed-rate`` (a reply that is not the JSON
verdict), ``--latency-ms`` (added to every chat request), ``--rate-limit R`` (requests/s, token
bucket with a burst of max(1, R); excess requests get 429 with ``Retry-After`` in whole seconds),
``--drill MODE`` (answer as a GLM-4.7 endpoint can: thinking in ``reasoning_content`` or in the
text, truncation, a draft verdict, a 429 with code 1113, a slow thinking phase; judges/drills.py).
Startup prints one line with the bound address (``--port 0`` picks a free one):
``judges.server listening on http://127.0.0.1:PORT/v1 ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python judges/server.py` from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.extras import MissingExtra, require_extra

try:  # without the `llm` extra: say which extra to install, not "No module named 'fastapi'"
    require_extra("llm", "the judge server (judges/server.py)", ("fastapi", "starlette", "uvicorn"))
except MissingExtra as exc:
    if __name__ == "__main__":
        sys.exit(f"error: {exc}")
    raise

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from judges.drills import DRILLS, QUOTA_ERROR, Drill
from judges.http_replies import Reject as _Reject
from judges.http_replies import error as _error
from judges.http_replies import json_reply as _json
from judges.http_replies import read_body as _read_body
from judges.service import MALFORMED_REPLIES, BadRequest, JudgeService, count_tokens  # noqa: F401
from testbed import registry

__all__ = ["JudgeService", "build_judge", "main", "make_app", "make_server"]

MAX_BODY_BYTES = 4 * 1024 * 1024  # a judge prompt is a few kB; a repair turn about twice that
READ_TIMEOUT_S = 30.0


def make_app(
    service: JudgeService,
    max_body_bytes: int = MAX_BODY_BYTES,
    read_timeout_s: float = READ_TIMEOUT_S,
    remote_reward: Any = None,
) -> FastAPI:
    """The OpenAI-compatible routes; with `remote_reward` (testbed/integrations/remote_reward.py)
    also OpenRLHF's remote reward route, `POST /get_reward`, and `GET /drift`."""
    svc = service
    app = FastAPI(title="testbed judge server", openapi_url=None, docs_url=None, redoc_url=None)
    if remote_reward is not None:
        add_reward_routes(app, svc, remote_reward, max_body_bytes, read_timeout_s)

    @app.exception_handler(HTTPException)  # an unknown route or method: the OpenAI error shape
    async def no_route(request: Request, exc: HTTPException) -> Response:
        svc.count("requests")
        svc.count("bad_request")
        return _error(exc.status_code, f"no route {request.method} {request.url.path}", "invalid_request_error")

    @app.get("/stats")
    async def stats() -> Response:
        return _json(200, svc.stats())

    @app.get("/health")
    async def health() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/v1/models")
    @app.get("/models")
    async def models(request: Request) -> Response:
        svc.count("requests")
        svc.count("models")
        if not svc.authorized(request.headers.get("authorization")):
            svc.count("unauthorized")
            return _error(401, "invalid or missing bearer token", "authentication_error")
        return _json(
            200,
            {
                "object": "list",
                "data": [{"id": svc.model_name, "object": "model", "created": int(svc.started), "owned_by": "testbed"}],
            },
        )

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat(request: Request) -> Response:
        svc.count("requests")
        svc.count("chat_completions")
        try:
            return await _chat(request)
        except _Reject as r:
            svc.count(r.counter)
            return _error(r.status, r.message, r.kind, r.headers, r.code)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening; nothing to say
        except Exception as exc:  # noqa: BLE001 - a reply, never a traceback or a dropped connection
            svc.count("judge_errors")
            return _error(500, f"internal error: {type(exc).__name__}", "server_error")

    async def _chat(request: Request) -> Response:
        if not svc.authorized(request.headers.get("authorization")):  # before the body is read
            raise _Reject(
                401, "invalid or missing bearer token", "authentication_error", "unauthorized", {"Connection": "close"}
            )
        raw = await _read_body(request, max_body_bytes, read_timeout_s)
        wait = svc.take_token()
        if wait > 0:
            raise _Reject(
                429,
                "rate limit exceeded",
                "rate_limit_error",
                "rate_limited",
                {"Retry-After": str(max(1, math.ceil(wait)))},
            )
        if svc.drill is not None and svc.drill.refuses:
            quota = QUOTA_ERROR["error"]
            raise _Reject(429, quota["message"], "rate_limit_error", "quota_refused", None, quota["code"])
        if svc.latency_s:
            await asyncio.sleep(svc.latency_s)
        inject_error, malformed, which = svc.draw()
        if inject_error:
            raise _Reject(500, "injected server error", "server_error", "injected_errors")
        try:
            body, req, prompt_tokens = svc.parse_body(raw)
        except BadRequest as exc:
            raise _Reject(400, str(exc), "invalid_request_error", "bad_request") from None
        svc.note_request(body)
        if svc.drill is not None and svc.drill.delay_s(body):
            await asyncio.sleep(svc.drill.delay_s(body))  # the thinking phase
        verdict = await svc.verdict(req)
        if verdict.error is not None:
            raise _Reject(500, f"judge error: {verdict.error}", "server_error", "judge_errors")
        reply = svc.completion(body, verdict, which if malformed else None, prompt_tokens, req.candidate_styles)
        return _json(200, reply)

    return app


def add_reward_routes(app: FastAPI, svc: JudgeService, reward: Any, max_body_bytes: int, timeout_s: float) -> None:
    """`POST /get_reward` (the body and reply of OpenRLHF's `--remote_rm_url`; `reward(body)` judges
    it on the scenario's clock) and `GET /drift` (the clock, target and judge now)."""

    @app.get("/drift")
    async def drift() -> Response:
        return _json(200, reward.status())

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Response:
        svc.count("requests")
        svc.count("rewards")
        try:
            if not svc.authorized(request.headers.get("authorization")):
                raise _Reject(401, "invalid or missing bearer token", "authentication_error", "unauthorized")
            raw = await _read_body(request, max_body_bytes, timeout_s)
            try:
                body = json.loads(raw)
            except ValueError:
                raise _Reject(400, "the body is not JSON", "invalid_request_error", "bad_request") from None
            return _json(200, await reward(body))
        except _Reject as r:
            svc.count(r.counter)
            return _error(r.status, r.message, r.kind, r.headers, r.code)
        except ValueError as exc:  # RemoteRewardError: its status, its message
            status = getattr(exc, "status", 400)
            svc.count("bad_request" if status == 400 else "judge_errors")
            return _error(status, str(exc), "invalid_request_error" if status == 400 else "server_error")


def make_server(
    service: JudgeService,
    host: str = "127.0.0.1",
    port: int = 0,
    verbose: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
    read_timeout_s: float = READ_TIMEOUT_S,
    remote_reward: Any = None,
) -> tuple[Any, socket.socket]:
    """A uvicorn Server for the service and its bound, listening socket (`port=0`: a free one):
    connections queue in the backlog from now on, so the address may be announced at once."""
    import uvicorn

    sock = socket.create_server((host, port), backlog=256)  # a burst of new keep-alive connections
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Every log line to stderr: stdout carries only the "listening on" line a parent reads.
    logs = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logs["handlers"]["access"]["stream"] = "ext://sys.stderr"
    # Idle keep-alive connections cost a coroutine, not a thread: keep them as long as a client pool does.
    config = uvicorn.Config(
        make_app(service, max_body_bytes, read_timeout_s, remote_reward),
        http="auto",
        loop="asyncio",
        log_config=logs,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=2,
        lifespan="off",
        server_header=False,
    )
    return uvicorn.Server(config), sock


def build_judge(name: str, args: dict[str, Any] | None = None) -> Any:
    """A judge instance from a registry name or an import path ("pkg.mod:Name")."""
    return registry.build(registry.load("judge", name), args or {})


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m judges.server", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--judge", default=None, help="registry name or import path 'pkg.mod:Name' (default: rubric, or the scenario's)"
    )
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
    ap.add_argument("--drill", choices=DRILLS, default=None, help="answer as a GLM-4.7 endpoint can (judges/drills.py)")
    ap.add_argument("--reasoning-tokens", type=int, default=None, help="a drill's thinking length in tokens")
    ap.add_argument("--reasoning-ms", type=float, default=None, help="a drill's thinking time (slow_reasoning)")
    ap.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help="larger bodies get 413")
    ap.add_argument("--read-timeout-s", type=float, default=READ_TIMEOUT_S, help="a body slower than this gets 408")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    # OpenRLHF's remote reward (POST /get_reward) on a scenario's drifting reward: docs/integrations.md
    ap.add_argument("--scenario", default=None, help="serve this scenario's reward at /get_reward (its clock, rows)")
    ap.add_argument("--run-dir", default=None, help="with --scenario: the run directory to write (must not exist)")
    ap.add_argument("--arm", default="openrlhf", help="with --scenario: the arm its rows are written under")
    ap.add_argument("--scenario-seed", type=int, default=None, help="with --scenario: the seed (default its first)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="scenario field")
    ap.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the process that started this server dies (no orphans)",
    )
    return ap


def _watch_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = _parser()
    a = ap.parse_args(argv)
    try:
        judge_args = json.loads(a.judge_args)
        if not isinstance(judge_args, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        ap.error(f"--judge-args: {exc}")
    if a.max_body_bytes < 1 or not a.read_timeout_s > 0 or not math.isfinite(a.read_timeout_s):
        ap.error("--max-body-bytes must be >= 1 and --read-timeout-s a finite number > 0")
    token = None
    if a.token_env:
        token = os.environ.get(a.token_env)
        if not token:
            ap.error(f"--token-env {a.token_env}: the environment variable is not set or empty")
    remote = open_remote_reward(ap, a)
    try:
        judge = remote.session.judge if remote and a.judge is None else build_judge(a.judge or "rubric", judge_args)
    except (registry.RegistryError, TypeError, ValueError) as exc:
        ap.error(f"--judge {a.judge}: {exc}")
    a.judge = a.judge or ("scenario" if remote else "rubric")
    model_name = a.model_name or f"testbed-{a.judge.rsplit(':', 1)[-1].lower()}"
    try:
        service = JudgeService(
            judge,
            model_name=model_name,
            token=token,
            error_rate=a.error_rate,
            malformed_rate=a.malformed_rate,
            latency_ms=a.latency_ms,
            rate_limit=a.rate_limit,
            seed=a.seed,
            drill=Drill.of(a.drill, a.reasoning_tokens, a.reasoning_ms) if a.drill else None,
        )
    except ValueError as exc:
        ap.error(str(exc))
    server, sock = make_server(service, a.host, a.port, a.verbose, a.max_body_bytes, a.read_timeout_s, remote)
    host, port = sock.getsockname()[:2]
    if a.exit_with_parent:
        _watch_parent()
    reward = f" remote_rm=http://{host}:{port}/get_reward run_dir={a.run_dir}" if remote else ""
    print(f"judges.server listening on http://{host}:{port}/v1 model={model_name} judge={a.judge}{reward}", flush=True)
    if remote is None:
        server.run(sockets=[sock])  # uvicorn handles SIGINT/SIGTERM: a graceful stop
        return
    # uvicorn stops gracefully, then raises the signal again with the handlers it found: these make
    # it an exception, so the run directory is closed (rows flushed, manifest written) on either signal
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stopped)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        remote.close()


def _stopped(sig: int, frame: Any) -> None:
    raise KeyboardInterrupt


def open_remote_reward(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Any:
    """With --scenario: the scenario's drifting reward on OpenRLHF's remote reward route
    (testbed/integrations/remote_reward.py, named by module path as the core names judges/)."""
    if a.scenario is None:
        if a.run_dir is not None:
            ap.error("--run-dir goes with --scenario")
        return None
    if a.run_dir is None:
        ap.error("--scenario needs --run-dir (the run directory the rewards' rows are written to)")
    module = importlib.import_module("testbed.integrations.remote_reward")
    try:
        return module.RemoteReward.open(a.scenario, a.run_dir, arm=a.arm, seed=a.scenario_seed, overrides=a.overrides)
    except (FileExistsError, OSError, ValueError) as exc:  # ScenarioError is a ValueError
        ap.error(f"--scenario {a.scenario}: {exc}")


if __name__ == "__main__":
    main()
