"""Natural-English text checks for the open-world judge: tokens, fluency, ending, repetition.

Fluency has two parts. Word reality: the share of words that are English words by wordfreq's
frequency list (its "large" English list, every word with Zipf frequency >= 1, read once from the
package's own data; nothing is downloaded), plus the style lexicons' own words (archaic -eth
verbs, "kukuku") that no frequency list holds. Sentence shape: closed-class words in orders
English does not produce ("the of", "we the", a sentence ending on "the"), and the share of
function words, which no English sentence does without and a list of content words has little of.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from wordfreq import get_frequency_dict

# A kaomoji the emoticon pattern below misses: symbols in brackets with no letter or digit ("(＾▽＾)",
# "(ᵔᴥᵔ)", "(;_;)", "(˶ᵔ ᵕ ᵔ˶)": a space may sit between symbols, never at either end), or two
# carets ("^^", "^_^")
KAOMOJI = r"\([^\sa-z0-9()](?:[^\na-z0-9()]{0,10}[^\sa-z0-9()])?\)|\^[_.-]?\^"
# Alternatives in order of frequency (sre tries them in order): words (inner apostrophes kept:
# "can't", "o'er"), runs of final punctuation, commas, emoticons (kaomoji, hearts, smileys), emoji,
# tildes, archaic clipped forms ('tis), other kaomoji, numbers ("8:15"), other marks.
_TOKEN = re.compile(  # the leading \s* skips a run of spaces in one step (findall returns the group)
    r"\s*([a-z]+(?:'[a-z]+)*|[.!?]+|,|\([^\s()]{0,4}[\^_][^\s()]{0,4}\)|<3+|[:;=]-?[()dp3](?![a-z])"
    r"|[\U0001F300-\U0001FAFF\u2600-\u27BF]\ufe0f?|~+|'(?:tis|twas|twixt|neath|gainst)\b|"
    + KAOMOJI
    + r"|[0-9]+(?:[.:,][0-9]+)*|[;:\"()\[\]%])"
)
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyz0123456789'")
FINAL = frozenset(".!?")


def normalise(text: str) -> str:
    """Lowercased, curly apostrophes made straight: what every check reads."""
    return text.lower().replace("\u2019", "'")


def tokens(low: str) -> list[str]:
    """Tokens of normalised text: words, numbers, emoticons, emoji, punctuation."""
    return _TOKEN.findall(low)


def words_of(toks: list[str]) -> list[str]:
    """The words (and numbers) among tokens, in order."""
    starts = _WORD_START
    return [t for t in toks if t[0] in starts]


def is_emoticon(tok: str) -> bool:
    c = tok[0]
    return (c in "(<:;=~^" and len(tok) > 1) or c == "~" or ord(c) >= 0x2600


def is_final(tok: str) -> bool:
    return tok[0] in FINAL or tok == "..."


# Every English word wordfreq lists (Zipf >= 1.0 is the list's own floor): a frozenset, so a
# lookup is one hash probe and the floats are not kept.
_ENGLISH: frozenset[str] = frozenset(get_frequency_dict("en", "large"))

FUNCTION_WORDS: frozenset[str] = frozenset(
    "a an the this that these those my your his her its our their some any every each no all both "
    "of to in on at for with by from into onto upon under over about after before between through during "
    "without within across against toward towards beneath beside behind around near off up down out "
    "and or but nor so yet because if when while though although than as whether since until unless "
    "i me we us you he him she they them it myself itself who whom whose which what where why how "
    "is are was were be been being am do does did have has had will would shall should can could may "
    "might must not there here then too very just also only even still again ever never more most "
    "thou thee thy thine ye hath doth dost hast art shalt wilt ere unto whilst".split()  # archaic ones too
)
_DETERMINERS = frozenset("a an the my your our their its every thy".split())
# "his" and "each" also stand alone ("gave me his.", "one ding each!", "each of them"): only what
# no pronoun use produces counts after them
_DET_OR_PRONOUN = frozenset("his each".split())
_PREPOSITIONS = frozenset("of to in on at for with by from into onto upon beneath between".split())
_SUBJECTS = frozenset("i we they he she".split())
_FINALS = frozenset(". ! ? ... !! ?! !? !!! ??".split())
# What English never puts right after each class (a shuffled sentence does, often): a determiner
# before another function word or a mark, a preposition before a verb or a subject pronoun ("to we"),
# a subject pronoun before a determiner, a preposition or another subject pronoun ("we the").
_AFTER_DET = (
    frozenset(
        "a an the of to and or but is are was were in on at for with by from i he she they we "
        "me him us them , ; :".split()
    )
    | _FINALS
)
_AFTER_PREP = frozenset("of to is are was were and or but i we they he she".split())
_AFTER_SUBJ = frozenset("the a an of my your to i we they he she".split())
_BAD_LAST = frozenset("a an the of and or but my your their our".split())  # a sentence cannot end on these
_BAD_PAIRS: frozenset[tuple[str, str]] = frozenset(
    {(a, b) for a in _DETERMINERS for b in _AFTER_DET}
    | {(a, b) for a in _DET_OR_PRONOUN for b in ("a", "an", "the", "i", "he", "she", "they", "we", "me", "him", "us")}
    | {(a, b) for a in _PREPOSITIONS for b in _AFTER_PREP}
    | {(a, b) for a in _SUBJECTS for b in _AFTER_SUBJ}
    | {(a, b) for a in _BAD_LAST for b in _FINALS}
)


@dataclass(frozen=True)
class Shape:
    words: int
    known: float  # share of words that are English words
    function: float  # share of words that are function words
    disorder: int  # distinct closed-class word pairs English does not produce ("the of", "we the", "the.")


def shape(toks: list[str], counts: Counter[str], lexicon: frozenset[str]) -> Shape:
    """Word reality and sentence shape: `toks` from tokens(), `counts` the Counter of its words,
    `lexicon` extra known words. Set operations, so the cost is per distinct word."""
    n = sum(counts.values())
    distinct = counts.keys()
    # set(small).difference(big) walks the small set; `keys - big` would walk all of wordfreq's list
    unknown = sum(counts[w] for w in set(distinct).difference(_ENGLISH).difference(lexicon) if not _known_form(w))
    function = sum(map(counts.__getitem__, distinct & FUNCTION_WORDS))  # map: no generator frame
    disorder = len(disorder_pairs(toks))
    d = max(n, 1)
    return Shape(n, (n - unknown) / d, function / d, disorder)


def disorder_pairs(toks: list[str]) -> frozenset[tuple[str, str]]:
    """The distinct adjacent closed-class pairs English does not produce (_BAD_PAIRS) among tokens."""
    return _BAD_PAIRS.intersection(zip(toks, toks[1:]))


def _known_form(tok: str) -> bool:
    # numbers; possessives of known words; -eth and -est verb forms ("purreth", "writest"), real
    # Early Modern English that is rare in any frequency list
    return (
        tok[0].isdigit()
        or tok.removesuffix("'s") in _ENGLISH
        or (len(tok) >= 5 and tok.endswith(("eth", "est")) and tok[:-3].isalpha())
    )


# Interjections that close a chat-register piece as a full stop closes a sentence ("... hehe",
# "... uwu", "... lol"): a sign-off, where a cut-off piece stops mid-phrase
SIGN_OFFS = frozenset("hehe hehehe teehee heehee hihi uwu owo nya yay lol lolol xd xoxo rawr".split())


def proper_ending(toks: list[str]) -> bool:
    """Ends on . ! ? or '...', maybe followed by closing marks, or on an emoticon: a sign-off that
    a cut-off piece does not produce."""
    return _last(toks, lambda tok: is_final(tok) or is_emoticon(tok))


def signs_off(toks: list[str]) -> bool:
    """Ends on a chat-register interjection (SIGN_OFFS), maybe followed by closing marks. A sign-off
    line with no stop ("... Love Nana xx") is not one: a rule for it (a few words after the last stop
    or emoticon, benchmarks/train_ending.py) passed 25% of synthetic cuts, so it is not used."""
    return _last(toks, SIGN_OFFS.__contains__)


def _last(toks: list[str], ok: Callable[[str], bool]) -> bool:
    for tok in reversed(toks):
        if tok in ('"', ")", "]"):
            continue
        return ok(tok)
    return False


def repetition(words: list[str], counts: Counter[str], max_share: float = 0.12) -> str | None:
    """A degenerate loop: 'span' (one word four times in a row, a 2-word span three times: the
    world's own repeat corruption; "click, click, click" is rhetoric), 'ngram' (a 4-word sequence
    three times, or a 6-word one twice: also a 3-word span three times in a row), 'word' (a content
    word over max(4, max_share of the words)), else None. Natural prose repeats a phrase now and
    then, never like this. `counts` is the Counter of `words`."""
    # a word four times in a row is first a word twice in a row: map(eq) finds one in C, and most
    # pieces have none, so the 4-word scan is skipped
    doubled = any(map(operator.eq, words, words[1:]))
    four_list = list(zip(words, words[1:], words[2:], words[3:]))
    if doubled and any(a == b == c == d for a, b, c, d in four_list):
        return "span"
    if four_list and len(set(four_list)) == len(four_list):  # every other loop repeats a 4-word sequence:
        return _overused(counts, max(4, int(max_share * len(words))))  # most pieces stop here
    fours = Counter(four_list)
    sixes = list(zip(words, words[1:], words[2:], words[3:], words[4:], words[5:]))
    if any(a == c == e and b == d == f for a, b, c, d, e, f in sixes):
        return "span"
    if (fours and max(fours.values()) >= 3) or len(set(sixes)) < len(sixes):
        return "ngram"
    return _overused(counts, max(4, int(max_share * len(words))))


def _overused(counts: Counter[str], cap: int) -> str | None:
    if max(counts.values(), default=0) <= cap:  # no word over the cap (cap >= 4): one C pass, most pieces
        return None
    return "word" if any(c > cap for w, c in counts.items() if c > 4 and w not in FUNCTION_WORDS) else None
