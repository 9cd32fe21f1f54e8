"""Academic structure for the open-world judge: what makes a piece read as academic when it uses
few of the lexicon's academic words (judges/open_styles.py).

Three habits of academic prose that everyday prose has little of:
  nominalisations  long nouns made from verbs and adjectives by the usual suffixes (-tion, -ment,
                   -ity, -ance/-ence, -ancy/-ency, -ship, -ism) ("the preparation", "persistence",
                   "relocation", "variability"); everyday prose has a few, academic prose packs them
  hedges           claims held at arm's length ("appears to", "tend to", "is likely", "possibly",
                   "remains unclear")
  evidence         claims tied to someone's findings ("reports that", "found that", "n = 412",
                   "prior work"), beside the citations and percentages open_styles.py counts
Each occurrence adds a little mass (the weights below), so one habit alone, or a few nominalisations
in a long everyday piece, stays under the plain threshold; several together read as academic.
"""

from __future__ import annotations

import re
from collections.abc import Collection

NOMINAL_W, HEDGE_W, EVIDENCE_W = 0.25, 0.4, 0.5

# a noun of seven letters or more on a derivational suffix (short ones, "moment", "station", never
# match); _EVERYDAY holds the few of this shape that everyday speech uses all the time
_NOMINAL = re.compile(
    r"\b[a-z]{4,}(?:tions?|sions?|ments?|ities|ity|ances?|ences?|ancy|ency|ancies|encies|ships?|isms?)\b"
)
_HEDGE = re.compile(
    r"\b(?:appears? to|appeared to|seems? to|tends? to|(?:is|are|was|were) likely|likely to|possibly|plausibly"
    r"|presumably|arguably|to some extent|in part|remains? (?:unclear|uncertain|limited|speculative|contested))\b"
)
_EVIDENCE = re.compile(
    r"\b(?:(?:reports?|reported|found|finds|shown|showed|shows|documents?|documented|reveals?|revealed)"
    r" that|prior work|previous work|n = \d|according to [a-z]+ et al)"
)
_EVERYDAY = frozenset("question questions apartment apartments appointment appointments".split())


def academic_structure(low: str, counted: Collection[str]) -> tuple[float, list[str]]:
    """(mass, what was found: 'nominal x5', 'hedge x1', 'evidence x1') for the normalised piece;
    words in `counted` (the style lexicons' words, already counted) are not counted again."""
    nominal = sum(1 for w in _NOMINAL.findall(low) if w not in _EVERYDAY and w not in counted)
    hedge = len(_HEDGE.findall(low))
    evidence = len(_EVIDENCE.findall(low))
    found = [f"{name} x{n}" for name, n in (("nominal", nominal), ("hedge", hedge), ("evidence", evidence)) if n]
    return NOMINAL_W * nominal + HEDGE_W * hedge + EVIDENCE_W * evidence, found
