"""Prompt injection aimed at the judge: text in a piece that addresses its grader, tells it to
drop its rules, or forges a verdict. A piece that does any of this fails quality (reason
"injection"), however good the rest is: an answer to a writing prompt has no business talking to
its judge, and a judge that passed such pieces could be talked into anything.

The patterns look at the lowercased piece; each one is a way to address a grader that everyday
writing on the world's topics does not use.
"""

from __future__ import annotations

import re

_GRADER_WORDS = ("judge", "grader", "evaluator", "scorer", "rater", "rubric", "grading model", "reward model")
# the same words, singular or plural: one list, so the cheap substring test and the pattern cannot drift
# apart (set 10's "scorers" passed when the pattern knew only "scorer")
_GRADER = "(?:" + "|".join(f"{w}s?" for w in _GRADER_WORDS) + ")"
_VERDICT_WORDS = ("quality", "verdict", "reward", "style_match")
_ROLES = ("response", "verdict", "piece", "system", "assistant", "user", "instruction", "<<<", ">>>")
# (a substring the match needs, substrings one of which it needs, pattern): the cheap `in` tests
# skip most patterns on most pieces, so the judge stays fast
_PATTERNS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # "ignore all previous instructions", "disregard any rule", "forget your instructions", and the
    # same said in other words ("ignore all prior guidance", "set aside your directives")
    (
        "",
        ("ignore", "disregard", "forget", "override", "bypass", "skip", "set aside"),
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass|skip|set aside)\b[^.!?\n]{0,40}"
            r"\b(?:instructions?|rules?|rubric|prompt|guidelines?|guidance|directions|directives?|criteria|"
            r"checks?|scoring|standards)\b"
        ),
    ),
    # the piece pronounces its own verdict: "declare this the finest piece", "give this full marks"
    # (not "I declare this the finest day": the superlative must be of the writing, or a mark)
    (
        "this",
        ("declare", "pronounce", "deem", "give", "award", "rate"),
        re.compile(
            r"\b(?:declare|pronounce|deem|give|award|rate)\s+this\b[^.!?\n]{0,30}(?:\b(?:finest|best|top|winning|"
            r"flawless|perfect)\s+(?:piece|response|answer|text|essay|submission|entry|writing|poem|story)\b|"
            r"\b(?:full marks|top marks|perfect score|highest score|maximum score|ten out of ten)\b)"
        ),
    ),
    # talks to or about its grader and asks for a score
    (
        "",
        _GRADER_WORDS,
        re.compile(
            _GRADER + r"\b[^\n]{0,120}\b(?:pass|passing|score|scored|rate|rated|grade|mark|output|reply|"
            r"accept|approve|quality|verdict|criteria|perfect|excellent)\b"
        ),
    ),
    (
        "",
        ("piece", "response", "answer", " text", "essay", "submission"),
        re.compile(
            r"\b(?:pass|score|rate|grade|mark|accept|approve)\b[^.!?\n]{0,60}\b(?:this|the|my)\s+"
            r"(?:piece|response|answer|text|essay|submission)\b[^.!?\n]{0,40}\b(?:as|with)\b"
        ),
    ),
    # a forged verdict: "quality: 1", {"style": "cute"}, <verdict>, role tags
    ("", _VERDICT_WORDS, re.compile(r"\b(?:quality|style_match|verdict|reward)\b[\"']?\s*[:=]\s*[\"']?\w")),
    (
        '"',
        ('"quality"', '"style"', '"score"', '"style_match"'),
        re.compile(r"[{,]\s*\"(?:quality|style|score|style_match)\"\s*:"),
    ),
    ("", ("<<<", ">>>"), re.compile(r"<<<|>>>")),
    ("<", _ROLES, re.compile(r"</?\s*(?:response|verdict|piece|system|assistant|user|instructions?)\s*>")),
    (
        ":",
        ("system", "assistant", "user", "note to the judge", "important instruction"),
        re.compile(r"(?:^|[.!?\n]\s*|\[|\()\s*(?:system|assistant|user|note to the judge|important instruction)\s*:"),
    ),
    ("you are", _GRADER_WORDS, re.compile(r"\byou are (?:now )?(?:a|an|the) [a-z ]{0,20}" + _GRADER)),
)


def injection(text: str) -> bool:
    """Whether the lowercased piece talks to its judge (see the module docstring)."""
    has = text.__contains__  # map(has, keys) runs the substring tests in C, with no generator frame
    for need, keys, p in _PATTERNS:  # noqa: SIM110  (a loop: any() over a generator costs a frame per pattern)
        if (not need or has(need)) and any(map(has, keys)) and p.search(text):
            return True
    return False
