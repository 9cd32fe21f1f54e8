"""The judge server (judges/server.py) under attack over raw sockets: a slow body, a huge
Content-Length, a non-integer one, JSON nested 100,000 deep, odd content parts, no token. Each
gets an HTTP error reply (never a dropped connection, a held handler or a traceback), and then a
normal request is answered correctly."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import socket
import time

import openai
import pytest

from judges.local_server import LocalJudgeServer
from judges.rubric import RubricJudge
from judges.template import load_template
from testbed.types import JudgeRequest
from testbed.world import generate, prompts, render_prompt

TOKEN_ENV = "TESTBED_TEST_ATTACK_TOKEN"
READ_TIMEOUT_S = 1.0
MAX_BODY = 1_000_000  # room for the 100,000-deep JSON below (up to 600 kB)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    token = "tok-" + secrets.token_hex(8)
    os.environ[TOKEN_ENV] = token
    log = (tmp_path_factory.mktemp("attack") / "stderr.txt").open("w+")
    srv = LocalJudgeServer(
        {"token_env": TOKEN_ENV, "read_timeout_s": READ_TIMEOUT_S, "max_body_bytes": MAX_BODY}, stderr=log
    )
    yield srv, token, log
    srv.stop()
    log.close()
    os.environ.pop(TOKEN_ENV, None)


def port_of(srv: LocalJudgeServer) -> int:
    return int(srv.api_base.rsplit(":", 1)[1].split("/")[0])


def read_reply(s: socket.socket) -> tuple[int, dict]:
    """One HTTP reply from the socket: (status, JSON body); fails on a close with no reply."""
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = s.recv(65536)
        assert chunk, f"connection closed with no HTTP reply (got {reply!r})"
        reply += chunk
    headers, _, rest = reply.partition(b"\r\n\r\n")
    status = int(headers.split(b" ", 2)[1])
    length = next(
        (int(h.split(b":", 1)[1]) for h in headers.split(b"\r\n") if h.lower().startswith(b"content-length:")), 0
    )
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    try:
        return status, json.loads(rest[:length]) if length else {}
    except ValueError:
        return status, {"raw": rest[:length].decode("latin-1")}


def exchange(srv: LocalJudgeServer, head: bytes, body: bytes = b"", wait_s: float = 10.0) -> tuple[int, dict, float]:
    """Send raw bytes on a new connection, read one HTTP reply: (status, JSON body, seconds taken)."""
    with socket.create_connection(("127.0.0.1", port_of(srv)), timeout=wait_s) as s:
        t0 = time.perf_counter()
        s.sendall(head + body)
        status, data = read_reply(s)
        return status, data, time.perf_counter() - t0


def post(token: str | None, length: int | str, extra: bytes = b"") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + auth
        + f"Content-Length: {length}\r\n".encode()
        + extra
        + b"\r\n"
    )


def a_request() -> JudgeRequest:
    rng = random.Random(5)
    spec = prompts("train")[0]
    cands = ("academic", "cute", "chuunibyou")
    return JudgeRequest(render_prompt(spec, cands), generate("cute", spec.topic, rng), "cute", cands, spec.topic)


def body_of(messages) -> bytes:
    return json.dumps({"model": "m", "messages": messages}).encode()


@contextlib.contextmanager
def counts(srv: LocalJudgeServer, counter: str, at_least: int = 1):
    """The server's own count of `counter` rises by at least `at_least` over the block (each test
    checks the counts it causes: no test depends on which others ran before it, or where)."""
    before = srv.stats()[counter]
    yield
    after = srv.stats()[counter]
    assert after - before >= at_least, f"{counter}: {before} -> {after}"


def test_no_token_is_refused_before_the_body_is_read(server):
    srv, _, _ = server
    with counts(srv, "unauthorized", 2):
        status, data, elapsed = exchange(srv, post(None, 100))  # the 100 bytes never come
        assert status == 401 and data["error"]["type"] == "authentication_error" and elapsed < READ_TIMEOUT_S
        status, _, _ = exchange(srv, post("wrong", 100))
        assert status == 401


def test_huge_content_length_is_refused_at_once(server):
    srv, token, _ = server
    with counts(srv, "too_large"):
        status, data, elapsed = exchange(srv, post(token, 10**9), b"0123456789")
    assert status == 413 and "over the limit" in data["error"]["message"] and elapsed < READ_TIMEOUT_S


def test_a_chunked_body_over_the_limit_is_cut_off(server):
    """No Content-Length to check up front: the server counts what it reads."""
    srv, token, _ = server
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        + f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    chunk = b"x" * 300_000
    body = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * 4 + b"0\r\n\r\n"
    status, data, _ = exchange(srv, head, body)
    assert status == 413 and f"limit of {MAX_BODY}" in data["error"]["message"]


def test_slow_body_times_out_without_holding_the_server(server):
    srv, token, _ = server
    timeouts = srv.stats()["read_timeouts"]
    slow = socket.create_connection(("127.0.0.1", port_of(srv)), timeout=10)
    try:
        t0 = time.perf_counter()
        slow.sendall(post(token, 100) + b'{"model": ')  # 10 of 100 bytes, then nothing
        # meanwhile the server answers others
        req = a_request()
        status, data, _ = exchange(srv, post(token, len(b := body_of(load_template().render(req)))), b)
        assert status == 200
        status, data = read_reply(slow)
        elapsed = time.perf_counter() - t0
        assert slow.recv(1) == b""  # and the server closed it: the rest of the body is never read
    finally:
        slow.close()
    assert status == 408 and "not received within" in data["error"]["message"]
    assert READ_TIMEOUT_S * 0.9 <= elapsed < READ_TIMEOUT_S + 3
    assert srv.stats()["read_timeouts"] == timeouts + 1


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "12, 13"])
def test_non_integer_content_length_gets_400(server, length):
    srv, token, _ = server
    status, _, _ = exchange(srv, post(token, length), b"{}")  # the HTTP parser's reply: no handler counts it
    assert status == 400


@pytest.mark.parametrize(
    "body, text",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"messages": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001, "nested too deeply"),
        (b"\xff\xfe not utf-8", "not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"messages": "hi"}', "non-empty list"),
        (b'{"messages": [7]}', "messages[0] must be an object"),
        (
            body_of([{"role": "user", "content": [{"type": "text", "text": 5}]}]),
            "messages[0].content[0].text must be a string",
        ),
        (
            body_of([{"role": "user", "content": [{"type": "text", "text": None}]}]),
            "messages[0].content[0].text must be a string",
        ),
        (body_of([{"role": "user", "content": ["just a string part"]}]), "messages[0].content[0] must be an object"),
        (body_of([{"role": "user", "content": {"text": "x"}}]), "content must be a string or a list"),
    ],
)
def test_malformed_bodies_get_400_naming_the_problem(server, body, text):
    srv, token, _ = server
    with counts(srv, "bad_request"):
        status, data, _ = exchange(srv, post(token, len(body)), body)
    assert status == 400 and text in data["error"]["message"], data


def test_after_the_attacks_a_normal_request_is_answered_and_nothing_crashed(server):
    """Whatever else ran on this server before (all of this module, or only this test where
    pytest-xdist splits it), a burst of attacks first, then a normal request."""
    srv, token, log = server
    for head, body in [
        (post(None, 10), b""),
        (post(token, 10**9), b"x"),
        (post(token, "abc"), b"{}"),
        (post(token, 6), b"[1, 2]"),
    ]:
        assert exchange(srv, head, body)[0] in (400, 401, 413)
    req = a_request()
    messages = load_template().render(req)
    status, data, _ = exchange(srv, post(token, len(b := body_of(messages))), b)
    verdict = json.loads(data["choices"][0]["message"]["content"])
    expect = RubricJudge().score(req)
    assert status == 200 and (verdict["quality"], verdict["style"]) == (expect.quality, expect.style)
    client = openai.OpenAI(base_url=srv.api_base, api_key=token, max_retries=0, timeout=10)
    resp = client.chat.completions.create(model="m", messages=messages)
    assert json.loads(resp.choices[0].message.content)["style"] == expect.style
    stats = srv.stats()
    assert stats["unauthorized"] >= 1 and stats["too_large"] >= 1 and stats["bad_request"] >= 1
    log.flush()
    log.seek(0)
    errors = log.read()
    assert "Traceback" not in errors and token not in errors
