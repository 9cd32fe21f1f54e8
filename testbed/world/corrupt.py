"""Corruptions: damaged pieces the judge must fail on quality (one failure mode each)."""

from __future__ import annotations

import random

from testbed.world.generator import generate, generate_tokens
from testbed.world.language import EMOTICON_SET, FINAL_PUNCT, is_word, join_words, split_words
from testbed.world.topics import TOPICS, topic_keywords

CORRUPTIONS: tuple[str, ...] = ("shuffle", "truncate", "repeat", "off_topic")


def _ending_len(toks: list[str]) -> int:
    """How many trailing tokens form the ending ('.', or '!' + emoticon)."""
    if len(toks) >= 2 and toks[-1] in EMOTICON_SET and toks[-2] in FINAL_PUNCT:
        return 2
    return 1 if toks and toks[-1] in FINAL_PUNCT else 0


def _shuffle(toks: list[str], rng: random.Random) -> list[str]:
    # Word salad with the ending kept in place, so only fluency can catch it.
    k = _ending_len(toks)
    body, end = toks[: len(toks) - k], toks[len(toks) - k :]
    shuffled = body[:]
    for _ in range(10):
        rng.shuffle(shuffled)
        if shuffled != body:
            break
    return shuffled + end


def _truncate(toks: list[str], rng: random.Random) -> list[str]:
    # Cut mid-piece, then drop trailing sentence ends so the text stops mid-sentence.
    n = len(toks)
    cut = toks[: rng.randint(max(2, int(0.4 * n)), max(2, int(0.75 * n)))]
    while len(cut) > 1 and (cut[-1] in FINAL_PUNCT or cut[-1] in EMOTICON_SET):
        cut.pop()
    return cut


def _repeat(toks: list[str], rng: random.Random) -> list[str]:
    # A stuck decoder: a 1-3 word span repeated several times in a row.
    starts = [i for i in range(len(toks) - 3) if all(is_word(t) for t in toks[i : i + 3])]
    i = rng.choice(starts) if starts else 0
    span_len = rng.choice((1, 2, 3))
    span = toks[i : i + span_len]
    copies = 4 if span_len == 1 else 3
    return toks[:i] + span * copies + toks[i + span_len :]


def _other_topic(topic: str, rng: random.Random) -> str:
    keys = topic_keywords(topic) if topic in TOPICS else frozenset()
    options = [t for t in TOPICS if t != topic and not (topic_keywords(t) & keys)]
    return rng.choice(options)


def corrupt(text: str, kind: str, rng: random.Random, *, style: str, topic: str) -> str:
    """A damaged version of `text` (a piece of `style` about `topic`) that should fail quality:
    shuffle (word order), truncate (stops mid-sentence), repeat (degenerate loop), off_topic
    (a well-formed piece of the same style about a different topic)."""
    if kind == "off_topic":
        return generate(style, _other_topic(topic, rng), rng)
    toks = split_words(text) or generate_tokens(style, topic, rng)
    if kind == "shuffle":
        return join_words(_shuffle(toks, rng))
    if kind == "truncate":
        return join_words(_truncate(toks, rng))
    if kind == "repeat":
        return join_words(_repeat(toks, rng))
    raise ValueError(f"unknown corruption {kind!r}; expected one of {CORRUPTIONS}")
