"""GLM-4.7 drills for the local judge server (`--drill MODE`): replies shaped as a real GLM-4.7
endpoint can shape them, around the wrapped judge's verdict, so that the LLM judge's handling of
each is tested through LiteLLM and real HTTP, as a real endpoint is reached.

    reasoning_content  thinking in a `reasoning_content` field, the verdict in `content` (Z.ai's API)
    think_tags         `<think>thinking</think>` then the verdict, all in `content`
    lone_close         thinking, a lone `</think>`, the verdict: a server without the reasoning
                       parser, whose chat template put `<think>` into the prompt
    truncate           reasoning_content, with thinking longer than the default budget
                       (2,048 tokens against max_tokens 1,024): cut off, finish_reason "length",
                       empty `content`
    draft              lone_close, the thinking holding a draft verdict that differs from the
                       final one (quality flipped, another style)
    quota              every chat request gets HTTP 429 with Z.ai's code 1113 (no balance, or a
                       key for another plan) in the body
    slow_reasoning     reasoning_content, after a thinking phase of `reasoning_ms` (1,500 ms)

Thinking is on unless the request turns it off (`"thinking": {"type": "disabled"}` in the body,
which is what the LLM judge's `thinking: off` sends): then every drill but quota answers the
plain verdict at once. The thinking is `reasoning_tokens` words (64 by default, 2,048 for
truncate) and counts against the request's `max_tokens`, as a provider counts it: a reply whose
thinking and answer do not fit is cut at the budget, with finish_reason "length". Where the
thinking has its own field, `usage.completion_tokens_details.reasoning_tokens` reports it; a
server that leaves it in the text (think_tags, lone_close, draft) cannot tell, and reports none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from judges.config import DRILLS

__all__ = ["DRILLS", "QUOTA_ERROR", "Drill", "DrillReply", "draft_of"]

QUOTA_ERROR = {"error": {"code": "1113", "message": "Insufficient balance or no resource package. Please recharge."}}
_TOKEN_RX = re.compile(r"\w+|[^\w\s]")  # the server's token count (judges/service.py, count_tokens)
_WORDS = "let me read the piece and weigh its style and its quality against the target".split()
_OWN_FIELD = {"reasoning_content", "truncate", "slow_reasoning"}  # thinking in reasoning_content
_DEFAULT_TOKENS = {"truncate": 2048}


@dataclass(frozen=True)
class DrillReply:
    message: dict[str, Any]  # the assistant message
    finish_reason: str
    completion_tokens: int
    reasoning_tokens: int | None  # None: not reported


def cut(text: str, budget: int | None) -> tuple[str, int, bool]:
    """(the text up to its `budget`-th token, its tokens, whether it was cut)."""
    tokens = list(_TOKEN_RX.finditer(text))
    if budget is None or len(tokens) <= budget:
        return text, len(tokens), False
    return (text[: tokens[budget - 1].end()] if budget > 0 else ""), budget, True


def thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def budget(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


@dataclass(frozen=True)
class Drill:
    mode: str
    reasoning_tokens: int
    reasoning_ms: float

    @classmethod
    def of(cls, mode: str, reasoning_tokens: int | None = None, reasoning_ms: float | None = None) -> Drill:
        if mode not in DRILLS:
            raise ValueError(f"drill must be one of {', '.join(DRILLS)}, got {mode!r}")
        if (reasoning_tokens is not None and reasoning_tokens < 1) or (reasoning_ms is not None and reasoning_ms < 0):
            raise ValueError("--reasoning-tokens must be >= 1 and --reasoning-ms >= 0")
        tokens = reasoning_tokens if reasoning_tokens is not None else _DEFAULT_TOKENS.get(mode, 64)
        default_ms = 1500.0 if mode == "slow_reasoning" else 0.0
        return cls(mode, tokens, reasoning_ms if reasoning_ms is not None else default_ms)

    @property
    def refuses(self) -> bool:
        return self.mode == "quota"

    def delay_s(self, body: dict[str, Any]) -> float:
        """How long the thinking phase takes before the reply (none with thinking off)."""
        return self.reasoning_ms / 1000.0 if thinking_on(body) else 0.0

    def thinking_text(self, draft: str) -> str:
        words = [_WORDS[i % len(_WORDS)] for i in range(self.reasoning_tokens)]
        if self.mode == "draft":  # the draft verdict in the middle of the thinking
            half = len(words) // 2
            words[half:half] = ["draft", draft, "but", "wait", "let", "me", "look", "again"]
        return " ".join(words)

    def reply(self, answer: str, draft: str, body: dict[str, Any]) -> DrillReply:
        """The reply for a final `answer` (the verdict JSON), `draft` a verdict that differs."""
        if not thinking_on(body):
            text, n, was_cut = cut(answer, budget(body))
            return DrillReply({"role": "assistant", "content": text}, "length" if was_cut else "stop", n, 0)
        thinking = self.thinking_text(draft)
        limit = budget(body)
        if self.mode in _OWN_FIELD:
            reasoning, r, cut_r = cut(thinking, limit)
            left = None if limit is None else limit - r
            content, a, cut_a = ("", 0, True) if cut_r else cut(answer, left)
            message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
            return DrillReply(message, "length" if cut_a else "stop", r + a, r)
        opening = "<think>" if self.mode == "think_tags" else ""
        text, n, was_cut = cut(f"{opening}{thinking}</think>{answer}", limit)
        return DrillReply({"role": "assistant", "content": text}, "length" if was_cut else "stop", n, None)


def draft_of(verdict_json: str, candidates: tuple[str, ...]) -> str:
    """A draft verdict that differs from the final one: quality flipped, another style."""
    final = json.loads(verdict_json)
    other = next((c for c in (*candidates, "plain", "cute") if c != final["style"]), "plain")
    return json.dumps({"quality": 1 - int(final["quality"]), "style": other})
