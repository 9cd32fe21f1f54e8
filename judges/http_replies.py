"""The judge server's HTTP replies: a JSON body, an error in the OpenAI error shape, a request body
read within a size and a time limit (a `Reject` carries the status and the counter it bumps).
Shared by the OpenAI-compatible route and the remote reward route of judges/server.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response


class Reject(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        counter: str,
        headers: dict[str, str] | None = None,
        code: str | None = None,  # the error body's code (default: the status)
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.counter, self.headers = status, message, kind, counter, headers
        self.code = code


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status, headers, media_type="application/json")


def error(
    status: int, message: str, kind: str, headers: dict[str, str] | None = None, code: str | None = None
) -> Response:
    body = {"message": message, "type": kind, "param": None, "code": code or str(status)}
    return json_reply(status, {"error": body}, headers)


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, at most `limit` bytes, within `timeout_s`; _Reject otherwise. An early reply
    closes the connection (the rest of the body is never read)."""
    close = {"Connection": "close"}
    length = request.headers.get("content-length")
    if length is not None:  # the HTTP parser has refused most bad values already; belt and braces
        if not length.strip().isdigit():
            raise Reject(
                400,
                f"Content-Length must be an integer, got {length[:40]!r}",
                "invalid_request_error",
                "bad_request",
                close,
            )
        if int(length) > limit:
            raise Reject(
                413,
                f"body of {int(length)} bytes is over the limit of {limit}",
                "invalid_request_error",
                "too_large",
                close,
            )
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Reject(
                    413, f"body is over the limit of {limit} bytes", "invalid_request_error", "too_large", close
                )
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise Reject(
            408, f"request body not received within {timeout_s:g} s", "invalid_request_error", "read_timeouts", close
        ) from None
    return b"".join(chunks)
