"""The world's language: tokenisation, the compiled grammar and its exact bigram set, and the
structural checks (length, repetition, ending) that both the generator and judge use.

Tokenisation is deliberately trivial: whitespace-separated chunks, emoticons kept whole, the
punctuation marks . , ! ? ; : peeled off as separate tokens. Case is preserved (the world itself
only emits lowercase); the judge lowercases before scoring.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from testbed.world.styles import COMMON, EMOTICONS, STYLE_SPECS, STYLES
from testbed.world.topics import TOPIC_LEXICONS, TOPIC_SLOTS, TOPICS

PUNCT: frozenset[str] = frozenset(".,!?;:")
FINAL_PUNCT: frozenset[str] = frozenset(".!?")
EMOTICON_SET: frozenset[str] = frozenset(EMOTICONS)

# Function words that may repeat freely; any other word appearing more than MAX_CONTENT_REPEATS
# times in one piece counts as degenerate repetition.
STOPWORDS: frozenset[str] = frozenset(
    "a an the and or but of to in on at for with by from as is are was were be been it its i me my we "
    "you your he she they them this that these those so so not no all very most more than then there "
    "who why how what when whether while can could will would shall should do did does have has had "
    "up out about over under every each some such both one after again too".split()
)
MAX_CONTENT_REPEATS = 3
MIN_WORDS, MAX_WORDS = 15, 40  # what the generator emits
JUDGE_MIN_WORDS, JUDGE_MAX_WORDS = 10, 50  # what the judge accepts


# ---------------------------------------------------------------- tokenisation


def _split_chunk(chunk: str, out: list[str]) -> None:
    if chunk in EMOTICON_SET:
        out.append(chunk)
        return
    # Peel leading and trailing punctuation; what is left in the middle stays one token.
    i, j = 0, len(chunk)
    while i < j and chunk[i] in PUNCT:
        i += 1
    while j > i and chunk[j - 1] in PUNCT:
        j -= 1
    out.extend(chunk[:i])
    if i < j:
        out.append(chunk[i:j])
    out.extend(chunk[j:])


def split_words(text: str) -> list[str]:
    """Canonical tokens: emoticons whole, . , ! ? ; : separate, case preserved."""
    out: list[str] = []
    for chunk in text.split():
        _split_chunk(chunk, out)
    return out


def join_words(words: Sequence[str]) -> str:
    """Inverse of split_words on world text: spaces between tokens, none before punctuation."""
    parts: list[str] = []
    for w in words:
        if parts and w not in PUNCT:
            parts.append(" ")
        parts.append(w)
    return "".join(parts)


def is_word(tok: str) -> bool:
    """A word (not punctuation, not an emoticon)."""
    return tok not in PUNCT and tok not in EMOTICON_SET


def count_words(tokens: Sequence[str]) -> int:
    return sum(1 for t in tokens if is_word(t))


# ---------------------------------------------------------------- structural checks


def proper_ending(tokens: Sequence[str]) -> bool:
    """Ends with . ! ? optionally followed by one emoticon."""
    if not tokens:
        return False
    if tokens[-1] in FINAL_PUNCT:
        return True
    return tokens[-1] in EMOTICON_SET and len(tokens) >= 2 and tokens[-2] in FINAL_PUNCT


def repetition_problem(tokens: Sequence[str]) -> str | None:
    """'trigram' if a word trigram occurs twice, 'word' if a content word occurs too often."""
    words = [t.lower() for t in tokens if is_word(t)]
    seen: set[tuple[str, str, str]] = set()
    for tri in zip(words, words[1:], words[2:]):
        if tri in seen:
            return "trigram"
        seen.add(tri)
    counts: dict[str, int] = {}
    for w in words:
        if w not in STOPWORDS:
            c = counts[w] = counts.get(w, 0) + 1
            if c > MAX_CONTENT_REPEATS:
                return "word"
    return None


# ---------------------------------------------------------------- the compiled grammar

Part = tuple[bool, str]  # (is_slot, token-or-slot-name)
Template = tuple[Part, ...]


def compile_template(template: str) -> Template:
    parts: list[Part] = []
    for tok in split_words(template):
        if tok.startswith("{") and tok.endswith("}"):
            parts.append((True, tok[1:-1]))
        else:
            parts.append((False, tok))
    return tuple(parts)


@functools.cache
def compiled(style: str) -> tuple[tuple[Template, ...], tuple[Template, ...]]:
    """(openers, bodies) of a style, compiled."""
    spec = STYLE_SPECS[style]
    return tuple(map(compile_template, spec.openers)), tuple(map(compile_template, spec.bodies))


def _tokenise_fillers(phrases: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(split_words(p)) for p in phrases)


@functools.cache
def fillers(style: str, topic: str, slot: str) -> tuple[tuple[str, ...], ...]:
    """Token sequences that may fill `slot` when writing `style` about `topic`."""
    if slot in TOPIC_SLOTS:
        return _tokenise_fillers(TOPIC_LEXICONS[topic][slot])
    if slot in COMMON:
        return _tokenise_fillers(COMMON[slot])
    lex = STYLE_SPECS[style].lexicon
    if slot in lex:
        return _tokenise_fillers(lex[slot])
    raise KeyError(f"unknown slot {{{slot}}} in style {style!r}")


@functools.cache
def _all_fillers(style: str, slot: str) -> tuple[tuple[str, ...], ...]:
    """Fillers of a slot over every topic (the grammar's language is the union over topics)."""
    if slot in TOPIC_SLOTS:
        return tuple({f for t in TOPICS for f in fillers(style, t, slot)})
    return fillers(style, TOPICS[0], slot)


def _part_alternatives(style: str, part: Part) -> tuple[tuple[str, ...], ...]:
    is_slot, val = part
    return _all_fillers(style, val) if is_slot else ((val,),)


def _template_edges(style: str, tpl: Template, bigrams: set[tuple[str, str]]) -> tuple[set[str], set[str]]:
    """Add a template's bigrams; return (possible first tokens, possible last tokens)."""
    prev_last: set[str] = set()
    first: set[str] = set()
    for k, part in enumerate(tpl):
        alts = _part_alternatives(style, part)
        heads = {a[0] for a in alts}
        for a in alts:
            bigrams.update(zip(a, a[1:]))
        bigrams.update((p, h) for p in prev_last for h in heads)
        if k == 0:
            first = heads
        prev_last = {a[-1] for a in alts}
    return first, prev_last


@functools.cache
def valid_bigrams() -> frozenset[tuple[str, str]]:
    """Every adjacent token pair the grammar can produce, computed exactly from the templates
    and lexicons (not sampled): within sentences, and across opener->body and body->body joins."""
    bigrams: set[tuple[str, str]] = set()
    for style in STYLES:
        openers, bodies = compiled(style)
        ends: set[str] = set()
        body_starts: set[str] = set()
        for tpl in openers:
            ends |= _template_edges(style, tpl, bigrams)[1]
        for tpl in bodies:
            first, last = _template_edges(style, tpl, bigrams)
            body_starts |= first
            ends |= last
        bigrams.update((e, s) for e in ends for s in body_starts)
    return frozenset(bigrams)


@functools.cache
def style_tokens(style: str) -> frozenset[str]:
    """Every token a piece of `style` can contain (any topic)."""
    toks: set[str] = set()
    openers, bodies = compiled(style)
    for tpl in openers + bodies:
        for part in tpl:
            for alt in _part_alternatives(style, part):
                toks.update(alt)
    return frozenset(toks)
