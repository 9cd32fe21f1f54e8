"""What a chat completion says, as the LLM judge reads it: the final answer apart from the
reasoning, and whether the reply was cut off.

A reasoning model (GLM-4.7 with thinking on) returns its thinking in one of three ways, and only
the final answer is ever parsed:

- a `reasoning_content` field beside `content` (LiteLLM fills it from the provider's field, or
  from a *leading* `<think>...</think>` block it splits off itself);
- a `<think>...</think>` block at the start of `content` (where LiteLLM left it);
- everything up to a lone `</think>` in `content`: a server without the matching reasoning
  parser puts `<think>` into the prompt, so the reply carries only the closing tag.

A reply is truncated when `finish_reason` is "length" (the token budget ran out, often inside the
reasoning, leaving `content` empty) or when its text opens a reasoning block and never closes it.
A truncated reply has no answer: it is never parsed, and never "repaired" by asking again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from judges.template import split_reasoning

__all__ = ["Reply", "read_reply", "reasoning_tokens"]


@dataclass(frozen=True)
class Reply:
    answer: str | None  # the final answer's text; None for a truncated reply
    reasoning: str  # the thinking, from every place it can come from (kept only for its length)
    finish_reason: str | None

    @property
    def truncated(self) -> bool:
        return self.answer is None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def read_reply(resp: Any) -> Reply:
    """The Reply of a LiteLLM ModelResponse (an odd or empty one reads as an empty answer)."""
    try:
        choice = resp.choices[0]
        message = choice.message
    except (AttributeError, IndexError, TypeError):
        return Reply("", "", None)
    finish_reason = getattr(choice, "finish_reason", None)
    in_text, answer = split_reasoning(_text(getattr(message, "content", None)))
    reasoning = _text(getattr(message, "reasoning_content", None)) + in_text
    if finish_reason == "length":
        answer = None
    return Reply(answer, reasoning, finish_reason if isinstance(finish_reason, str) else None)


def reasoning_tokens(resp: Any) -> int:
    """`usage.completion_tokens_details.reasoning_tokens` where the provider reports it, else 0
    (they are part of `completion_tokens`, and billed as output)."""
    details = getattr(getattr(resp, "usage", None), "completion_tokens_details", None)
    value = getattr(details, "reasoning_tokens", None)
    return int(value) if isinstance(value, int) and value > 0 else 0
