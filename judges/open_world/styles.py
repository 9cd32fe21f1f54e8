"""Style markers of natural English for the open-world judge, beyond the world's own lexicon.

Each marked style has a lexicon of weighted words (1.0: only that register uses it; less: the
register favours it but plain prose uses it too) and a few patterns: emoticons, emoji, kaomoji,
tildes and stretched letters ("sooo") for cute; villain laughter for chuunibyou, and '!' for
whichever of the two leads; archaic verb forms (-eth, "thou" + -est/-st) and clipped forms (o'er,
'tis) for classical, with period and elevated diction ("upon", "thrice", "Papa") and older syntax
("waves do break", "we are come", "I confess") at lower weight; the dark-fantasy self-image
("brethren", "veil", "lair") for chuunibyou and the nursery ("ducklings", "wellies") for cute, also at
lower weight; citations and percentages for academic, with academic structure
(nominalisations, hedges, evidence: judges/open_world/structure.py). The world's markers
(testbed.world.styles) are all included at weight 1.
"""

from __future__ import annotations

import re
from collections import Counter

from judges.open_world.structure import academic_structure
from judges.open_world.text import KAOMOJI
from testbed.world.styles import STYLE_SPECS

MARKED: tuple[str, ...] = ("academic", "cute", "chuunibyou", "classical")  # the rubric's order
ACA, CUTE, CHUU, CLA = range(4)


def _table(spec: str) -> dict[str, float]:
    """'w1 w2 | 0.5: w3 w4' -> weights (a group without 'x:' weighs 1)."""
    out: dict[str, float] = {}
    for group in spec.split("|"):
        weight, sep, words = group.partition(":")
        if not sep:
            weight, words = "1", group
        out.update({w: float(weight) for w in words.split()})
    return out


_LEXICONS: dict[int, dict[str, float]] = {
    CUTE: _table(
        "tiny tiniest teeny teensy teeniest wittle smol fluffy fluffiest cozy coziest cosy snuggly snuggle snuggles "
        "snuggled cuddly cuddle cuddles squishy sparkly sparkle sparkles precious adorable cute cutest cutie cuties "
        "sweetie sweeties bestie besties hehe teehee yay yum yummy omg aww awww eee squee squeal squealed giggle "
        "giggles giggled doki tummy tummies wiggle wiggly plushie plushies kitty kitties bunny bunnies duckie doggie "
        "doggo birdie froggy piggy oopsie uwu owo nya rawr glittery pastel teddy mittens"
        "| 0.5: little sweet sweetest hug hugs hugging snack lovely pink fuzzy bouncy"
        # the nursery's words: baby animals, noises, a child's exclamations and treasures
        "| 0.5: duckling ducklings puppy puppies kitten kittens wellies beep squeak ouchy hooray yippee woohoo "
        "sticker stickers glitter"
    ),
    CHUU: _table(
        "behold mortal mortals abyss abyssal sealed seal seals cursed curse curses forbidden eternal crimson demon "
        "demons demonic accursed destiny fate pact realm realms dragon awaken awakens awakened awakening vessel fools "
        "foretold kukuku kukukuku fuhaha fuhahaha fuhahahaha muahaha mwahaha mwahahaha infernal hellhound sorcerer "
        "grimoire prophecy doom doomed wrath vengeance inferno unleash unleashed unleashes summon summoned summons "
        "obsidian oblivion apocalypse overlord minions underworld tremble trembles darkness relic legendary "
        "| 0.5: dark shadow shadows chosen ancient power powers flame flames battle warrior soul souls devour "
        "devours fear blade ritual heavens tempest serpents throne "
        # the dark-fantasy self-image: the fallen one, his lair, his foes and his arts
        "fool foolish lesser brethren veil fallen wings sacred transgression bloodline fangs inquisitor conquest "
        "lair fortress vortex dimension spectre legion empire scythe rune runes arcane forsaken destined "
        "transcend transcended cleansed fury omen sigil wretched insolent kneel"
    ),
    CLA: _table(
        "thou thee thy thine hath doth dost hast ere o'er e'er ne'er 'tis 'twas 'twixt 'neath 'gainst alas hark "
        "verily yonder forsooth methinks prithee wherefore whence whither thither hither thence nay shalt canst "
        "wouldst couldst shouldst didst hadst mayst mightst betwixt yore unto thereon thereof whereof withal "
        "perchance mayhap beseech twain anon morn tis twas"
        "| 0.7: lo ye oft wilt aye maiden sire kin wherein lest whilst | 0.4: mine fair o eve hearth steed"
        # period and elevated diction: modern English still knows these words but seldom writes them
        "| 0.5: upon amongst amid amidst forth evermore nevermore henceforth whereupon thrice pray fain nigh "
        "naught aught bade beheld slumber woe morrow dearest mamma papa sorely mournful lofty yea hie spake "
        "smote wrought abode dwelt"
    ),
    ACA: _table(
        "furthermore moreover consequently additionally notably nevertheless nonetheless whereas thus evidence "
        "findings data analysis analyses analysed analyzed literature participants respondents cohort longitudinal "
        "empirical empirically hypothesis hypotheses correlation correlated significant significantly framework "
        "variable variables suggests indicate indicates indicated demonstrate demonstrates demonstrated imply "
        "implies observed observational phenomenon interventions approximately proportion systematic systematically "
        "interpretation causal causality confounding epidemiological methodology prevalence meta ethnographic "
        "| 0.7: therefore hence research study studies suggest associated considerable substantial substantially "
        "examine examines examined investigate assess outcomes factors survey surveys experiments attributed "
        "| 0.4: however sample context perceived relative likely subsequent"
    ),
}
_ARCHAIC = frozenset(w for w, wt in _LEXICONS[CLA].items() if wt == 1.0)  # forms only older English uses
for _i, _style in enumerate(MARKED):  # the world's markers weigh 1 in the open lexicon too
    for _w in STYLE_SPECS[_style].markers:
        _LEXICONS[_i][_w] = 1.0
# An archaic form ("doth", "o'er", "unto", "thee") is absent from modern prose of any register, where
# the other styles' weight-1 words ("tiny", "data", "fate") turn up in plain pieces now and then: one
# archaic form is as much evidence of the classical register as ARCHAIC_W of those (dev data: lightly
# archaic pieces with one such form read plain at weight 1)
ARCHAIC_W = 1.5
for _w in _ARCHAIC:
    _LEXICONS[CLA][_w] = ARCHAIC_W

# One table for the hot path: word -> (style index, weight); a word in two lexicons keeps its heavier use.
MARKERS: dict[str, tuple[int, float]] = {}
for _i, _lex in _LEXICONS.items():
    for _w, _wt in _lex.items():
        if _w not in MARKERS or MARKERS[_w][1] < _wt:
            MARKERS[_w] = (_i, _wt)
LEXICON_WORDS: frozenset[str] = frozenset(MARKERS)  # known words for fluency, whatever a frequency list says

_TRIPLE = re.compile(r"([a-z])\1\1")
_STRETCH = re.compile(r"\b[a-z]*([a-z])\1\1[a-z]*")  # "sooo", "yayyy": a letter three times in a word
_ETH = re.compile(r"\b[a-z]{2,}(?<!ti)eth\b")  # "lingereth", "purreth": archaic 3rd person; not "seventieth"
_ETH_EXCEPTIONS = frozenset("teeth beneath seth beth kenneth elizabeth macbeth".split())
_THOU_VERB = re.compile(r"\bthou (art|[a-z]{2,}st)\b")  # "thou art", "thou writest", "thou wouldst"
_EMOTICONS = re.compile(
    r"\([^\s()]{0,4}[\^_][^\s()]{0,4}\)|<3+|[:;=]-?[()dp3](?![a-z])"
    r"|[\U0001F300-\U0001FAFF\u2600-\u27BF]|~+|" + KAOMOJI
)
# Older English syntax that no archaic word marks: "waves do break" (the unstressed do of verse),
# "would that", "let us", "let no man", "I confess", "I fear", "pray write", "we are come", "on
# Tuesday last", "came I", "said he" (the verb before its subject)
_PERIOD = re.compile(
    r"\b[a-z]+s do (?!not\b|you\b|we\b|it\b|they\b|i\b|so\b|the\b|a\b|this\b|that\b|some\b|any\b|what\b)[a-z]+"
    r"|\bwould that\b|\blet (?:us\b(?! know\b)|no man\b|none\b)|\bi (?:confess|fear)\b"
    r"|(?:^|[.!?,] )pray (?!for\b|to\b|that\b)[a-z]+"
    r"|\b(?:we|they|i|he|she) (?:are|am|is) come\b"
    r"|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday) last\b"
    r"|\b(?:came|went|said|spoke|cried|sat|stood|lay) (?:i|he|she|we|they)\b"
    r"(?! (?:would|will|had|have|was|were|is|should|could|can|did|must|might)\b)"
)
# What every _PERIOD match contains, one per branch: "s do ", "would that", "let us" or "let no", "i
# confess", "i fear", "pray ", "are/am/is come", "day last", or a speech verb then a pronoun. The
# full pattern costs ~50 us on a 50-word piece (a scan from every word); these cues send it only
# the few pieces that may match: most hand-written pieces hold "said " or " do ", few "said he"
_PERIOD_KEYS = (
    *("s do ", "would that", "let us", "let no", "i confess", "i fear", "pray "),
    *("re come", "am come", "is come", "day last"),
)
_SPEECH_KEYS = ("came ", "went ", "said ", "spoke ", "cried ", "sat ", "stood ", "lay ")
_SPEECH = re.compile(r"(?:came|went|said|spoke|cried|sat|stood|lay) (?:i|he|she|we|they)\b")  # "said he"
_CITATION = re.compile(r"\([a-z][a-z .&]*,? (?:19|20)\d\d[a-z]?\)|\[\d+(?:[,-]\d+)*\]|\bet al\b")
EMOTICON_W, BANG_W, STRETCH_W, ETH_W, THOU_VERB_W, CITATION_W, PERCENT_W = 1.0, 0.3, 0.7, ARCHAIC_W, 0.7, 1.0, 0.5
PERIOD_W = 0.5


def style_scores(counts: Counter[str], low: str) -> tuple[list[float], int, list[list[str]]]:
    """(marker mass per style in MARKED order, occurrences of weight-1 marker words, the markers
    found per style): `counts` the Counter of the piece's words, `low` the normalised piece (for
    marks and patterns). The markers are what the style decision used: lexicon words, then
    patterns as 'name xN'."""
    scores = [0.0, 0.0, 0.0, 0.0]
    found: list[list[str]] = [[], [], [], []]
    strong = 0
    # sorted: a set's order changes with the process's hash seed, and a float sum's with the order
    for w in sorted(counts.keys() & MARKERS.keys()):
        i, wt = MARKERS[w]
        c = counts[w]
        scores[i] += wt * c
        found[i].append(w)
        strong += c if wt >= 1.0 else 0
    if "eth" in low:
        _add(
            scores,
            found,
            CLA,
            "-eth",
            ETH_W,
            sum(1 for w in _ETH.findall(low) if w not in MARKERS and w not in _ETH_EXCEPTIONS),
        )
    if "thou " in low:
        _add(scores, found, CLA, "thou+verb", THOU_VERB_W, sum(1 for w in _THOU_VERB.findall(low) if w not in MARKERS))
    if _period_cue(low):
        _add(scores, found, CLA, "period syntax", PERIOD_W, len(_PERIOD.findall(low)))
    _add(scores, found, ACA, "percent", PERCENT_W, low.count("%") + counts.get("percent", 0))
    cute, cute_found = _cute_marks(low)
    scores[CUTE] += cute
    found[CUTE] += cute_found
    # '!' is excitement, a villain's or a child's: it amplifies whichever of the two the rest of the
    # piece already shows more of (chuunibyou on a tie, as when nothing else is marked)
    _add(scores, found, CUTE if scores[CUTE] > scores[CHUU] else CHUU, "!", BANG_W, low.count("!"))
    if "(" in low or "[" in low or "et al" in low:
        _add(scores, found, ACA, "citation", CITATION_W, len(_CITATION.findall(low)))
    mass, structure = academic_structure(low, counts, MARKERS)
    scores[ACA] += mass
    found[ACA] += structure
    return scores, strong, found


def _period_cue(low: str) -> bool:
    """Whether `low` holds a cue of older syntax (_PERIOD_KEYS, _SPEECH): without one, _PERIOD
    finds nothing. map() runs the substring tests in C, with no generator frame."""
    has = low.__contains__
    return any(map(has, _PERIOD_KEYS)) or (any(map(has, _SPEECH_KEYS)) and _SPEECH.search(low) is not None)


def _add(scores: list[float], found: list[list[str]], i: int, name: str, weight: float, n: int) -> None:
    if n:
        scores[i] += weight * n
        found[i].append(f"{name} x{n}")


_SMILEY = re.compile(r"[:;=]-?[()dp3]")  # what a smiley in _EMOTICONS needs, without its lookahead


def _emoticon_cue(low: str) -> bool:
    """Whether `low` may hold an emoticon, emoji or tilde: non-ASCII, or one of "(<:;=~" (the test
    the judge has always made: most pieces have none) and what some _EMOTICONS branch needs,
    "(" with ")", "<3", "~", "^" or a smiley. Colons and parentheses are common in prose, smileys
    and kaomoji are not: the full pattern is scanned on half as many pieces."""
    if not low.isascii():
        return True
    has = low.__contains__  # map(has, ...) runs the substring tests in C, with no generator frame
    if not any(map(has, "(<:;=~")):
        return False
    return (has("(") and has(")")) or has("<3") or has("~") or has("^") or _SMILEY.search(low) is not None


def _cute_marks(low: str) -> tuple[float, list[str]]:
    """Emoticons, emoji, tildes, and stretched words the lexicon does not already count."""
    mass, found = 0.0, []
    if _emoticon_cue(low):
        n = len(_EMOTICONS.findall(low))
        mass += EMOTICON_W * n
        found += [f"emoticon x{n}"] if n else []
    if _TRIPLE.search(low):  # rare: only then look for the words
        n = sum(1 for m in _STRETCH.finditer(low) if m.group(0) not in MARKERS)
        mass += STRETCH_W * n
        found += [f"stretched x{n}"] if n else []
    return mass, found
