"""Academic structure for the open-world judge: what makes a piece read as academic when it uses
few of the lexicon's academic words (judges/open_world/styles.py).

Three habits of academic prose that everyday prose has little of:
  nominalisations  long nouns made from verbs and adjectives by the usual suffixes (-tion, -ment,
                   -ity, -ance/-ence, -ancy/-ency, -ship, -ism) ("the preparation", "persistence",
                   "relocation", "variability"); everyday prose has a few, academic prose packs them
  hedges           claims held at arm's length ("appears to", "tend to", "is likely", "possibly",
                   "remains unclear")
  evidence         claims tied to someone's findings ("reports that", "found that", "n = 412",
                   "prior work"), beside the citations and percentages open_styles.py counts
  register         the impersonal register those habits come in: long words (ten letters or more:
                   "considerably", "metropolitan", "circulation") and passives ("were prepared",
                   "has been shown"), counted only when the piece has no first or second person and
                   no contraction ("I", "my", "we", "you", "it's"): everyday prose with long words
                   speaks as someone
Each occurrence adds a little mass (the weights below), so one habit alone, or a few nominalisations
in a long everyday piece, stays under the plain threshold; several together read as academic.
The register's weights were chosen on development data (the voices corpus's dev, first held-out
and second held-out sets): dev good pieces are 10-20% long words when academic, 0-2% otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping

NOMINAL_W, HEDGE_W, EVIDENCE_W = 0.25, 0.4, 0.5
LONG_W, PASSIVE_W = 0.25, 0.3
LONG_MIN = 10  # letters

# a noun made by a derivational suffix from a stem of four letters or more (short ones, "moment",
# "station", never count); _EVERYDAY holds the few of this shape that everyday speech uses all the time
STEM_MIN = 4
_SUFFIXES = (
    *("tion", "tions", "sion", "sions", "ment", "ments", "ity", "ities", "ance", "ances", "ence", "ences"),
    *("ancy", "ency", "ancies", "encies", "ship", "ships", "ism", "isms"),
)
_EVERYDAY = frozenset("question questions apartment apartments appointment appointments".split())
_HEDGE = re.compile(
    r"\b(?:appears? to|appeared to|seems? to|tends? to|(?:is|are|was|were) likely|likely to|possibly|plausibly"
    r"|presumably|arguably|to some extent|in part|remains? (?:unclear|uncertain|limited|speculative|contested))\b"
)
_EVIDENCE = re.compile(
    r"\b(?:(?:reports?|reported|found|finds|shown|showed|shows|documents?|documented|reveals?|revealed)"
    r" that|prior work|previous work|n = \d|according to [a-z]+ et al)"
)
# substrings each pattern's matches need: most pieces have none, and an `in` test is far cheaper
# than a scan
_HEDGE_KEYS = ("appear", "seem", "tend", "likely", "bly", "to some extent", "in part", "remain")
_PASSIVE = re.compile(r"\b(?:is|are|was|were|been|being|be) (?:[a-z]+ly )?[a-z]{3,}(?:ed|en|wn)\b")
_PERSONAL = frozenset("i me my mine myself we us our ours ourselves you your yours yourself".split())
_EVIDENCE_KEYS = ("s that", "d that", "n that", "t that", "prior work", "previous work", "n = ", "et al")


def academic_structure(low: str, counts: Mapping[str, int], counted: Container[str]) -> tuple[float, list[str]]:
    """(mass, what was found: 'nominal x5', 'hedge x1', 'evidence x1') for the normalised piece
    `low` and the Counter of its words; words in `counted` (the style lexicons' words, already
    counted) are not counted again."""
    nominal = long_ = 0
    kinds = _KINDS
    for w, c in counts.items():  # one pass: a nominalisation is not counted again as a long word
        if len(w) <= STEM_MIN + 2 or w in counted:
            continue
        kind = kinds.get(w)
        if kind is None:
            kind = _remember_kind(w)
        if kind == _NOMINAL:
            nominal += c
        elif kind == _LONG:
            long_ += c
    has = low.__contains__  # map(has, keys) runs the substring tests in C, with no generator frame
    hedge = len(_HEDGE.findall(low)) if any(map(has, _HEDGE_KEYS)) else 0
    evidence = len(_EVIDENCE.findall(low)) if any(map(has, _EVIDENCE_KEYS)) else 0
    personal = bool(counts.keys() & _PERSONAL) or (
        "'" in low and any("'" in w and not w.endswith("'s") for w in counts)  # a contraction
    )
    passive = 0
    if personal:
        long_ = 0
    else:
        passive = len(_PASSIVE.findall(low))
    parts = (("nominal", nominal), ("hedge", hedge), ("evidence", evidence), ("long", long_), ("passive", passive))
    found = [f"{name} x{n}" for name, n in parts if n]
    mass = NOMINAL_W * nominal + HEDGE_W * hedge + EVIDENCE_W * evidence + LONG_W * long_ + PASSIVE_W * passive
    return mass, found


_NOMINAL, _LONG, _NEITHER = 1, 2, 0
# word -> _NOMINAL, _LONG or _NEITHER: words recur across pieces, and the suffix tests cost more than
# a look-up; bounded like the judge's other per-word memos
_KINDS: dict[str, int] = {}
KINDS_MAX = 100_000


def _remember_kind(word: str) -> int:
    """Whether a word of more than STEM_MIN + 2 letters is a nominalisation, else a long word, else
    neither (academic_structure's tests, in its order), remembered."""
    if word.endswith(_SUFFIXES) and _nominal(word) and word not in _EVERYDAY:
        kind = _NOMINAL
    elif len(word) >= LONG_MIN and word.isalpha():
        kind = _LONG
    else:
        kind = _NEITHER
    if len(_KINDS) >= KINDS_MAX:
        _KINDS.clear()
    _KINDS[word] = kind
    return kind


def _nominal(word: str) -> bool:
    return word.isalpha() and any(word.endswith(s) and len(word) - len(s) >= STEM_MIN for s in _SUFFIXES)
