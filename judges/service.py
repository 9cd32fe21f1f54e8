"""Everything the judge server does but HTTP: the wrapped judge, reading a chat request back into
a JudgeRequest, fault injection, the rate limit and the counters (judges/server.py puts it on
FastAPI). One instance serves every request; its methods are safe from any thread.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import random
import re
import threading
import time
import uuid
from typing import Any

from judges.drills import Drill, draft_of
from judges.template import TEMPLATE_DIR, TemplateError, load_template
from testbed.judging.adapter import as_judge
from testbed.types import JudgeRequest, Verdict

__all__ = ["MALFORMED_REPLIES", "BadRequest", "JudgeService", "count_tokens"]

_TOKEN_RX = re.compile(r"\w+|[^\w\s]")
_TAG_RX = re.compile(r"\[template (\w+)\]")
MALFORMED_REPLIES = (
    "I think this piece is rather nice, overall.",
    '{"quality": 1, "sty',
    "",
    '```json\n{"verdict": "good"}\n```',
)
COUNTERS = (
    "requests",
    "chat_completions",
    "models",
    "rewards",  # POST /get_reward: OpenRLHF's remote reward on a scenario (--scenario)
    "ok",
    "injected_errors",
    "malformed",
    "rate_limited",
    "unauthorized",
    "bad_request",
    "too_large",
    "read_timeouts",
    "judge_errors",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",  # a drill's thinking, where it reports it
    "thinking_off",  # requests that turned thinking off
    "json_mode",  # requests that asked for response_format json_object
    "truncated",  # replies cut off at the request's max_tokens (finish_reason "length")
    "quota_refused",  # requests refused by the quota drill (HTTP 429, code 1113)
)


class BadRequest(ValueError):
    """A request the server answers with HTTP 400; the message says what is wrong with it."""


@functools.lru_cache(maxsize=256)  # the system prompt is the same in every request
def count_tokens(text: str) -> int:
    """A rough token count (words and punctuation marks) for `usage`."""
    return len(_TOKEN_RX.findall(text))


def message_text(msg: dict[str, Any], where: str) -> str | None:
    """A message's text: a string, or OpenAI content parts `[{"type": "text", "text": "..."}]`
    joined. None for content that is neither (e.g. null); BadRequest for a part that is odd."""
    content = msg.get("content")
    if isinstance(content, str) or content is None:
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise BadRequest(f"{where}.content[{j}] must be an object")
        text = part.get("text", "")
        if not isinstance(text, str):
            raise BadRequest(f"{where}.content[{j}].text must be a string, got {type(text).__name__}")
        texts.append(text)
    return "".join(texts)


class JudgeService:
    def __init__(
        self,
        judge: Any,
        *,
        model_name: str = "testbed-judge",
        token: str | None = None,
        error_rate: float = 0.0,
        malformed_rate: float = 0.0,
        latency_ms: float = 0.0,
        rate_limit: float | None = None,
        seed: int = 0,
        drill: Drill | None = None,
    ) -> None:
        for name, rate in (("error_rate", error_rate), ("malformed_rate", malformed_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate}")
        if rate_limit is not None and rate_limit <= 0:
            raise ValueError(f"rate_limit must be > 0 requests/s, got {rate_limit}")
        self.model_name = model_name
        self.drill = drill
        self._token = token
        self.error_rate, self.malformed_rate = error_rate, malformed_rate
        self.latency_s = max(0.0, latency_ms) / 1000.0
        self.rate_limit = rate_limit
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._bucket = max(1.0, rate_limit or 1.0)
        self._bucket_t = time.monotonic()
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.started = time.time()
        # A plain `score(req)` (the rubric: ~60 us) is called inline on the server's loop: a hop to
        # a worker thread would cost more than the scoring. Anything else is awaited through the
        # Judge protocol (a slow sync judge, such as the small LM, brings its own thread).
        score = getattr(judge, "score", None)
        self._score = score if callable(score) and not asyncio.iscoroutinefunction(score) else None
        self._judge = as_judge(judge)

    # -- counters ------------------------------------------------------------------------------
    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self.counts)
        out.update(model=self.model_name, uptime_s=round(time.time() - self.started, 3))
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
            return (
                self._rng.random() < self.error_rate,
                self._rng.random() < self.malformed_rate,
                self._rng.randrange(len(MALFORMED_REPLIES)),
            )

    # -- judging -------------------------------------------------------------------------------
    def parse_body(self, raw: bytes) -> tuple[dict[str, Any], JudgeRequest, int]:
        """(body, the request its messages hold, prompt tokens); BadRequest for anything odd."""
        try:
            body = json.loads(raw or b"{}")
        except RecursionError:  # JSON nested deeper than the parser's stack
            raise BadRequest("the body is nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError, bad UTF-8
            raise BadRequest(f"the body is not JSON: {str(exc)[:200]}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if body.get("stream"):
            raise BadRequest("streaming is not supported")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        texts: list[tuple[dict[str, Any], str | None]] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise BadRequest(f"messages[{i}] must be an object")
            texts.append((msg, message_text(msg, f"messages[{i}]")))
        prompt_tokens = sum(count_tokens(t) for _, t in texts if t)
        return body, self.request_from_messages(texts), prompt_tokens

    def request_from_messages(self, texts: list[tuple[dict[str, Any], str | None]]) -> JudgeRequest:
        """The last user message in a known prompt format (so the LLM judge's repair turn, whose
        last user message is not the template, is answered too)."""
        problems = []
        for msg, content in reversed(texts):
            if msg.get("role") != "user" or content is None:
                continue
            tag = _TAG_RX.search(content)
            if tag is None:
                continue
            try:
                return load_template(tag.group(1)).parse_request(content)
            except TemplateError as exc:
                problems.append(str(exc))
        known = ", ".join(sorted(p.stem for p in TEMPLATE_DIR.glob("*.txt")))
        raise BadRequest(problems[0] if problems else f"no user message in a judge prompt format ({known})")

    async def verdict(self, req: JudgeRequest) -> Verdict:
        """The wrapped judge's verdict; a judge that raises gives a failed verdict (HTTP 500)."""
        try:
            if self._score is not None:
                return self._score(req)
            return (await self._judge.judge([req]))[0]
        except Exception as exc:  # noqa: BLE001 - reported to the client as a server error
            return Verdict.failed(f"{type(exc).__name__}: {exc}")

    def note_request(self, body: dict[str, Any]) -> None:
        """Count what the request asked of a reasoning model: thinking off, JSON mode."""
        thinking, fmt = body.get("thinking"), body.get("response_format")
        if isinstance(thinking, dict) and thinking.get("type") == "disabled":
            self.count("thinking_off")
        if isinstance(fmt, dict) and fmt.get("type") == "json_object":
            self.count("json_mode")

    def completion(
        self,
        body: dict[str, Any],
        verdict: Verdict,
        malformed: int | None,
        prompt_tokens: int,
        candidates: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """The chat.completion reply for a verdict (`malformed`: which malformed reply, if any;
        with a drill, shaped as the drill says, `candidates` giving its draft another style)."""
        if malformed is not None:
            self.count("malformed")
            content = MALFORMED_REPLIES[malformed]
        else:
            self.count("ok")
            content = json.dumps(
                {"quality": int(verdict.quality), "style": verdict.style or "plain", "reason": verdict.raw[:300]}
            )
        message: dict[str, Any] = {"role": "assistant", "content": content}
        finish_reason, completion_tokens, details = "stop", count_tokens(content), {}
        if self.drill is not None and malformed is None:
            shaped = self.drill.reply(content, draft_of(content, candidates), body)
            message, finish_reason, completion_tokens = shaped.message, shaped.finish_reason, shaped.completion_tokens
            if shaped.reasoning_tokens is not None:
                details = {"completion_tokens_details": {"reasoning_tokens": shaped.reasoning_tokens}}
                self.count("reasoning_tokens", shaped.reasoning_tokens)
            if finish_reason == "length":
                self.count("truncated")
        self.count("prompt_tokens", prompt_tokens)
        self.count("completion_tokens", completion_tokens)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model_name),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                **details,
            },
        }
