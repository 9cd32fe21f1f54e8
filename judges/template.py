"""The LLM judge's prompt template: load a versioned file, render a request, parse it back, and
parse a model's reply into a verdict.

The template files live in `judges/templates/<name>.txt` (the version is in the file name and in
the text itself: `[template style_judge_v1]`). A file has a comment header, then two sections,
`=== system ===` and `=== user ===`, with `${name}` placeholders:

    target_style, candidates, topic   one line each (newlines are flattened)
    prompt_json, response_json        JSON string literals (ASCII only, so one line each)
    nonce                             a random hex tag, fresh for every request

Prompt-injection hardening: the response is JSON-string-encoded (it cannot contain a raw newline
or an unescaped quote) and placed between `<<<PIECE nonce>>>` markers whose nonce it cannot know,
so it can neither close the data block nor forge the fields around it. `parse_request` (used by
`judges/server.py`) matches the whole user message against the template, with the nonce tied by a
back-reference and the response matched as exactly one JSON string literal, so text inside a
response is never read as a field. `parse_verdict` takes the model's reply apart: only its final
answer is read (`split_reasoning` removes a reasoning model's thinking first, so a draft verdict
in it is never taken), then code fences, prose around the JSON, any key/value case, quality as
0/1/"1"/true/"yes"/"pass"; if the answer holds several verdict objects that disagree it is
rejected as ambiguous rather than guessed.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from testbed.types import JudgeRequest

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DEFAULT_TEMPLATE = "style_judge_v1"
NO_TOPIC = "(not given)"
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
_FIELDS = {"target_style", "candidates", "topic", "prompt_json", "response_json", "nonce"}
_JSON_STRING = r'"(?:[^"\\\x00-\x1f]|\\.)*"'
_FIELD_RX = {
    "target_style": r"[^\n]*",
    "candidates": r"[^\n]*",
    "topic": r"[^\n]*",
    "prompt_json": _JSON_STRING,
    "response_json": _JSON_STRING,
    "nonce": r"[0-9a-f]{16,64}",
}

REPAIR_MESSAGE = (
    "Your previous reply could not be read as the required JSON. Reply again with exactly one JSON "
    'object and nothing else: {"quality": 0 or 1, "style": "<style>", "reason": "<one short sentence>"}'
)


def repair_turn(messages: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    """The conversation that asks again for the JSON verdict: the answer given (only the final
    answer, never the reasoning; no empty assistant message), then REPAIR_MESSAGE."""
    said = [{"role": "assistant", "content": answer}] if answer.strip() else []
    return [*messages, *said, {"role": "user", "content": REPAIR_MESSAGE}]


class TemplateError(ValueError):
    pass


class VerdictParseError(ValueError):
    pass


class TruncatedReply(VerdictParseError):
    """The reply opens a reasoning block and never closes it: it was cut off while thinking, and
    has no final answer (a truncation, not a verdict; never repaired by asking again)."""


def _one_line(value: str) -> str:
    return " ".join(str(value).split())


@dataclass(frozen=True)
class Template:
    name: str  # e.g. "style_judge_v1": the version is part of the name (and of the cache key)
    system: str
    user: str

    @property
    def version(self) -> str:
        return self.name

    def render(self, req: JudgeRequest, nonce: str | None = None) -> list[dict[str, str]]:
        """Chat messages for one request. A fresh random nonce unless one is given."""
        nonce = nonce or secrets.token_hex(12)
        response_json = json.dumps(req.response if isinstance(req.response, str) else str(req.response))
        if nonce in response_json:  # cannot happen by chance (96 random bits); refuse a forged one
            nonce = secrets.token_hex(16)
        values = {
            "target_style": _one_line(req.target_style),
            "candidates": ", ".join(_one_line(c) for c in req.candidate_styles),
            "topic": _one_line(req.topic) if req.topic else NO_TOPIC,
            "prompt_json": json.dumps(req.prompt if isinstance(req.prompt, str) else str(req.prompt)),
            "response_json": response_json,
            "nonce": nonce,
        }
        fill = lambda text: _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)  # noqa: E731
        return [{"role": "system", "content": fill(self.system)}, {"role": "user", "content": fill(self.user)}]

    @functools.cached_property
    def _user_rx(self) -> re.Pattern[str]:
        parts: list[str] = []
        seen: set[str] = set()
        pos = 0
        for m in _PLACEHOLDER.finditer(self.user.strip()):
            parts.append(re.escape(self.user.strip()[pos : m.start()]))
            name = m.group(1)
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>{_FIELD_RX[name]})")
            seen.add(name)
            pos = m.end()
        parts.append(re.escape(self.user.strip()[pos:]))
        return re.compile("".join(parts))

    def parse_request(self, user_text: str) -> JudgeRequest:
        """The request a user message was rendered from (the inverse of `render`)."""
        m = self._user_rx.fullmatch(user_text.strip())
        if m is None:
            raise TemplateError(f"message is not in the {self.name} prompt format")
        try:
            prompt = json.loads(m.group("prompt_json"))
            response = json.loads(m.group("response_json"))
        except json.JSONDecodeError as exc:  # the regex admits only string literals; belt and braces
            raise TemplateError(f"bad JSON string in the message: {exc}") from None
        topic = m.group("topic").strip()
        candidates = tuple(c.strip() for c in m.group("candidates").split(",") if c.strip())
        return JudgeRequest(
            prompt, response, m.group("target_style").strip(), candidates, None if topic == NO_TOPIC else topic
        )


@functools.cache
def read_sections(path: Path) -> dict[str, list[str]]:
    """A template file's `=== name ===` sections, as lists of lines ('#' comments allowed before
    the first section)."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        head = re.fullmatch(r"=== (\w+) ===\s*", line)
        if head:
            current = head.group(1)
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
        elif line.strip() and not line.startswith("#"):
            raise TemplateError(f"{path}: text before the first section: {line!r}")
    return sections


def load_sections(
    name: str,
    directory: Path,
    *,
    what: str,
    required: frozenset[str],
    optional: frozenset[str],
    fields: frozenset[str],
    needed: frozenset[str],
) -> tuple[Path, dict[str, str]]:
    """Every prompt file's loader (the LLM judge's and the small LM's): `<directory>/<name>.txt`
    (or a path to a .txt file), its sections (`required`, maybe some of `optional`) as stripped
    text, the `${...}` placeholders of its user section among `fields` and including `needed`.
    TemplateError naming the file and what is wrong otherwise."""
    path = Path(name) if name.endswith(".txt") else directory / f"{name}.txt"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.txt"))
        raise TemplateError(f"{what} '{name}' not found (known: {', '.join(known)})")
    sections = read_sections(path)
    if not required <= set(sections) <= required | optional:
        extra = f" (and optionally {', '.join(sorted(optional))})" if optional else ""
        raise TemplateError(
            f"{path}: needs the sections {', '.join(sorted(required))}{extra}, found {sorted(sections)}"
        )
    text = {k: "\n".join(v).strip() for k, v in sections.items()}
    used = set(_PLACEHOLDER.findall(text["user"]))
    if not needed <= used or not used <= fields:
        raise TemplateError(
            f"{path}: placeholders {sorted(used)}; allowed {sorted(fields)}, and {', '.join(sorted(needed))} required"
        )
    return path, text


@functools.cache  # a Template is immutable; the server loads one per request
def load_template(name: str = DEFAULT_TEMPLATE) -> Template:
    """Load `judges/templates/<name>.txt` (or a path to a .txt file)."""
    path, text = load_sections(
        name,
        TEMPLATE_DIR,
        what="prompt template",
        required=frozenset({"system", "user"}),
        optional=frozenset(),
        fields=frozenset(_FIELDS),
        needed=frozenset({"response_json", "nonce", "target_style"}),
    )
    if f"[template {path.stem}]" not in text["user"]:
        raise TemplateError(f"{path}: the user section must carry its version tag '[template {path.stem}]'")
    return Template(path.stem, text["system"], text["user"])


# ----------------------------------------------------------------------------------------------
# Reading a model's reply

_TRUE = {"1", "true", "yes", "pass", "passed", "good", "ok"}
_FALSE = {"0", "false", "no", "fail", "failed", "bad"}


def _quality(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str):
        v = value.strip().strip(".").lower()
        if v in _TRUE:
            return 1
        if v in _FALSE:
            return 0
    raise VerdictParseError(f"quality must be 0 or 1, got {value!r}")


def _style(value: object) -> str:
    if not isinstance(value, str):
        raise VerdictParseError(f"style must be a string, got {value!r}")
    v = " ".join(value.strip().strip(".\"'").lower().split())
    v = v.removesuffix(" style").strip()
    if not v or len(v) > 40:
        raise VerdictParseError(f"style must be a short name, got {value!r}")
    return v


def _objects(text: str) -> list[dict]:
    """Every JSON (or Python-literal) object embedded in the text, outermost first."""
    found: list[dict] = []
    decoder = json.JSONDecoder()
    pos = 0
    while (start := text.find("{", pos)) != -1:
        obj, end = None, start + 1
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            close = text.find("}", start)
            if close != -1:
                try:
                    obj, end = ast.literal_eval(text[start : close + 1]), close + 1
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    obj = None
        if isinstance(obj, dict):
            found.append(obj)
            pos = end
        else:
            pos = start + 1
    return found


_OPENS_REASONING = re.compile(r"\s*<(?:think|thinking)>", re.IGNORECASE)
_CLOSES_REASONING = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """(reasoning, final answer) of a reply's text. A reasoning model may put its thinking in the
    text: a leading `<think>...</think>` block, or, served without a reasoning parser (the opening
    tag is then part of the prompt), everything up to a lone `</think>`. The answer is what follows
    the last closing tag; None where the text opens a reasoning block and never closes it (cut off
    while thinking: there is no answer). Text without tags is all answer."""
    closes = list(_CLOSES_REASONING.finditer(text))
    if closes:
        return text[: closes[-1].start()], text[closes[-1].end() :]
    if _OPENS_REASONING.match(text):
        return text, None
    return "", text


def parse_verdict(text: str) -> tuple[int, str, str]:
    """(quality, style, reason) from a model's reply, read from its final answer alone
    (`split_reasoning`); TruncatedReply if it has none (reasoning never closed), VerdictParseError
    if the answer holds no verdict, or several that disagree. Never any other exception: an odd
    reply (nesting past the recursion limit, a 5,000-digit number, a non-JSON literal) is
    unreadable, and a caller's repair-then-error path must see it as such."""
    if isinstance(text, str):
        _, answer = split_reasoning(text)
        if answer is None:
            raise TruncatedReply("the reply opens a reasoning block and never closes it: no final answer (truncated)")
        text = answer
    try:
        return _parse_verdict(text)
    except VerdictParseError:
        raise
    except (RecursionError, ValueError, TypeError, AttributeError) as exc:
        raise VerdictParseError(f"unreadable reply ({type(exc).__name__}: {str(exc)[:200]})") from None


def _parse_verdict(text: str) -> tuple[int, str, str]:
    if not isinstance(text, str) or not text.strip():
        raise VerdictParseError("empty reply")
    verdicts: list[tuple[int, str, str]] = []
    problems: list[str] = []
    for obj in _objects(text):
        keys = {str(k).strip().lower(): v for k, v in obj.items()}
        if "quality" not in keys and "style" not in keys:
            continue
        try:
            reason = keys.get("reason", "")
            verdicts.append(
                (
                    _quality(keys.get("quality")),
                    _style(keys.get("style")),
                    reason if isinstance(reason, str) else json.dumps(reason),
                )
            )
        except VerdictParseError as exc:
            problems.append(str(exc))
    if not verdicts:
        raise VerdictParseError(problems[0] if problems else "no JSON verdict object in the reply")
    if len({v[:2] for v in verdicts}) > 1:
        raise VerdictParseError(f"ambiguous reply: {len(verdicts)} different verdict objects")
    return verdicts[0]
