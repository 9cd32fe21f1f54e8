"""Prompts: request templates x topics, split into train and held-out, and rendered with the
candidate styles. Held-out prompts use (template, topic) pairs never seen in training."""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.world.language import split_words
from testbed.world.styles import STYLES
from testbed.world.topics import TOPICS

REQUEST_TEMPLATES: tuple[str, ...] = (
    "write a short piece about {topic}.",
    "tell me something about {topic}.",
    "say a few words about {topic}.",
    "describe {topic} in a few lines.",
    "compose a few sentences on {topic}.",
    "share a thought about {topic}.",
    "write about {topic} for a friend.",
    "give me a short note on {topic}.",
)
STYLES_LABEL = "styles:"
HELDOUT_SIZE = 64
_SPLIT_SEED = 20240607  # fixed: the split must never change between runs


@dataclass(frozen=True)
class PromptSpec:
    prompt_id: str  # "<template index>:<topic with _ for spaces>", unique per (template, topic)
    topic: str
    request: str  # the instruction sentence with the topic filled in


@functools.cache
def _splits() -> dict[str, tuple[PromptSpec, ...]]:
    pairs = [(i, topic) for i in range(len(REQUEST_TEMPLATES)) for topic in TOPICS]
    held = set(random.Random(_SPLIT_SEED).sample(pairs, HELDOUT_SIZE))
    out: dict[str, list[PromptSpec]] = {"train": [], "heldout": []}
    for i, topic in pairs:
        spec = PromptSpec(f"{i}:{topic.replace(' ', '_')}", topic, REQUEST_TEMPLATES[i].format(topic=topic))
        out["heldout" if (i, topic) in held else "train"].append(spec)
    return {k: tuple(v) for k, v in out.items()}


def prompts(split: str) -> list[PromptSpec]:
    """The prompts of a split ("train" or "heldout"), in a fixed order."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', not {split!r}")
    return list(_splits()[split])


def render_prompt(spec: PromptSpec, candidates: Sequence[str]) -> str:
    """'write a short piece about coffee. styles: academic, cute, chuunibyou.'"""
    return f"{spec.request} {STYLES_LABEL} {', '.join(candidates)}."


_TEMPLATE_RES = tuple(
    re.compile("^" + re.escape(t).replace(re.escape("{topic}"), "(?P<topic>.+?)") + r"(?:\s|$)")
    for t in REQUEST_TEMPLATES
)
_TOPIC_SET = frozenset(TOPICS)
_TOPICS_LONGEST_FIRST = sorted(TOPICS, key=len, reverse=True)


def topic_of_prompt(prompt: str) -> str | None:
    """The topic of a rendered prompt (or of any text containing one request), else None."""
    text = " ".join(prompt.lower().split())
    for rx in _TEMPLATE_RES:
        m = rx.match(text)
        if m and m.group("topic") in _TOPIC_SET:
            return m.group("topic")
    # Fallback for prompts not made by render_prompt: the longest topic named as whole words.
    request = text.split(STYLES_LABEL, 1)[0]
    for topic in _TOPICS_LONGEST_FIRST:
        if re.search(r"(?<![a-z])" + re.escape(topic) + r"(?![a-z])", request):
            return topic
    return None


@functools.cache
def prompt_tokens() -> frozenset[str]:
    """Every token render_prompt can emit (for the vocabulary)."""
    toks: set[str] = set(split_words(STYLES_LABEL)) | set(STYLES) | {",", "."}
    for t in REQUEST_TEMPLATES:
        for topic in TOPICS:
            toks.update(split_words(t.format(topic=topic)))
    return frozenset(toks)
