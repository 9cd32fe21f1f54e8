"""Broken grammar in common words for the open-world judge's fluency check: general English rules
over adjacent words, with word classes read from the English inflection tables that ship in the
`lemminflect` wheel (0.2.3, MIT licence; only its gzipped look-up table and override list are read,
the package itself is never imported, nothing is downloaded).

The tables give, for 40,450 English lemmas, each noun's plural, each verb's past, past participle,
-ing and third-person forms, and adjectives and adverbs. From them, word classes: a past form that is
never a participle ("went", "ate"), a base form ("go", "send"), a third-person form ("goes"), an -ing
form, a plural noun that is never singular ("vendors", not "news" or "sheep"), and an irregular
verb's over-regular past ("buyed", "eated", "goed": the regular -ed form of a verb whose past is not
regular, when no table lists it as any word's form and the symspellpy unigram list, 82,765 words of
web English, does not hold it).

A violation is one of these adjacent-word patterns (each counted once per occurrence):
  been      a form of "be" before "been"                         "is been", "was been"
  perfect   have/has/had before a past form that is no participle  "has went", "had ate"
  do        do/does/did before a past form or a third-person form, does/did before "be" (not the
            imperative "don't be")                             "did went", "does goes", "doth be"
  modal     a modal before "to" or a past or third-person form     "will to try", "can goes"
            (can/will/may/must only after a subject pronoun: "the will to live", "May to June")
  number    I/we/they before a third-person form or is/has/does (we/they: was too); you before
            is/was/has/does; he/she before a base form (not will/can/may/must/need/dare) or
            are/am/have/do (not "were": "I wish she were"), unless an auxiliary, a modal, a
            causative or perception verb, "that" or "if" comes before the pronoun ("does she have",
            "let he who")
            "we was", "I goes", "she have", "she send"
  base      am before a base form, is/are/was/were/be before a base form that is no noun, neither
            an adjective nor an adverb (the tables', or a word whose -ly adverb the unigram list
            holds: "is complete")                                     "I am go", "is consume"
  ing       I/we/they/he/she before an -ing form, no auxiliary before it  "we eating"
  not       I/we/they/he/she before "not" (an auxiliary missing)      "she not come", "I not know"
  plural    a plural-only noun (one that is also a verb's third-person form, "stars", "shows", only
            after a determiner) before is/was/has/does, unless a preposition, a number or an -ing
            form or "to" stands between it and its clause's start ("one of the vendors was", "ten
            dollars is", "erosion at beaches is", "scrubbing the pots is"; "routines and networks
            has" looks past the "and")                                "vendors was"
  article   a/an/every/each/another before a plural-only noun that is no verb  "a books"
  regular   an over-regular past (above)                              "buyed", "eated"

`count(toks)` is the number of violations in a piece's tokens (judges/open_text.tokens);
`violations(toks)` lists them for the verdict. The tables load once, at the first piece outside the
world's vocabulary (~0.3-0.6 s, ~4.4 MB); a piece costs ~10-15 CPU microseconds (~50 tokens).
"""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

from judges.wheel_data import package_dir

INFLECTIONS = "resources/infl_lu.csv.gz"
OVERRIDES = "resources/infl_overrides.csv"

BE = frozenset("am is are was were be being art".split())
BE_SINGULAR = frozenset("is was has does".split())
HAVE = frozenset("have has had having hath hast 've".split())
DO = frozenset("do does did don't doesn't didn't doth dost".split())
IMPERATIVE_DO = frozenset("do don't".split())  # "don't be afraid", "do be careful": imperatives
MODALS = frozenset(
    "would could should might shall cannot wouldn't couldn't shouldn't mightn't shan't won't can't shalt wilt".split()
)
MODALS_NOUN = frozenset("can will may must".split())  # also nouns or months: only after a subject pronoun
SUBJECTS = frozenset("i you we they he she it thou".split())
PLURAL_SUBJECTS = frozenset("i we they".split())
THIRD = frozenset("he she".split())
# what may stand before a pronoun that is followed by a base form: an inverted auxiliary or modal
# ("does she have"), a causative or perception verb ("let he who", "make she"), "that" (subjunctive)
INVERTERS = (
    BE
    | HAVE
    | DO
    | MODALS
    | MODALS_NOUN
    | frozenset("let make made help helps helped see saw watch hear heard that whether if".split())
)
SEMI_MODALS = MODALS_NOUN | frozenset("need dare".split())  # "he will", "she need not": no agreement error
NOT_AFTER_HE = frozenset("are am have do don't".split())  # not "were": "as if he were", "I wish she were"
# a plural noun that is also a verb's third-person form ("stars", "shows") is read as the noun only
# after one of these ("the stars is"; "what it shows is" is English)
DETERMINERS = frozenset("the these those my your our their his her its some many all both such".split())
COUNTERS = frozenset("a an every each another".split())
# before a plural noun in its clause, these make it no head of the subject: a preposition ("one of the
# vendors was", "erosion at beaches is"), a number ("ten dollars is"); the clause starts after a mark,
# a conjunction or a relative word
MODIFIERS = frozenset(
    "of in on at for with by from into onto upon under over about after before between through during "
    "without within across against toward towards beneath beside behind around near among amongst than "
    "like per via along outside inside one two three four five six seven eight nine ten twenty hundred "
    "thousand million many few to".split()
)
CLAUSE = frozenset("and or but so because that which who whom whose where when while if".split())
LOOKBACK = 6


TRIGGERS = BE | HAVE | DO | MODALS | MODALS_NOUN | SUBJECTS | COUNTERS


class Classes:
    """Word classes from the inflection tables (module doc)."""

    def __init__(self, root: Path, attested: frozenset[str] | None = None) -> None:
        vb: set[str] = set()
        vbd: set[str] = set()
        vbn: set[str] = set()
        vbg: set[str] = set()
        vbz: set[str] = set()
        nn: set[str] = set()
        nns: set[str] = set()
        adj: set[str] = set()
        past_of: dict[str, set[str]] = {}
        with gzip.open(root / INFLECTIONS, "rt", encoding="utf-8") as f:
            for line in f:
                lemma, cat, *forms = line.rstrip("\n").split(",")
                if not lemma.islower():
                    continue
                parts = [tuple(x for x in p.split("/") if x) for p in forms]
                if cat == "noun":
                    nn.add(lemma)
                    if parts:
                        nns.update(parts[0])
                elif cat in ("adj", "adv"):
                    adj.add(lemma)
                    for p in parts:
                        adj.update(p)
                elif cat == "verb":
                    vb.add(lemma)
                    parts += [()] * (4 - len(parts))
                    past, part, ing, third = parts[:4]
                    vbd.update(past)
                    vbn.update(part or past)  # an empty participle is the past form
                    vbg.update(ing)
                    vbz.update(third)
                    past_of.setdefault(lemma, set()).update(past)
        with open(root / OVERRIDES, encoding="utf-8") as f:
            for line in f:
                lemma, tag, form = line.rstrip("\n").split(",")
                {"VBD": vbd, "VBN": vbn, "VBG": vbg, "VBZ": vbz, "NNS": nns}.get(tag, set()).add(form)
                if tag == "VBD":
                    past_of.setdefault(lemma, set()).add(form)
        listed = vb | vbd | vbn | vbg | vbz | nn | nns | adj
        regular: set[str] = set()
        for verb, pasts in past_of.items():
            made = _regular(verb)
            if not made & pasts:  # an irregular verb: its regular past is no English form
                regular |= made
        known = attested or frozenset()
        self.regular = frozenset(regular - listed - known)
        # a base form with an -ly adverb in the unigram list is an adjective the tables may miss:
        # "complete" (completely), "clean" (cleanly)
        self.adverb_of = frozenset(w for w in vb if _adverb(w) in known)
        self.past_only = frozenset(w for w in vbd - vbn - nn - adj - vb if not w.endswith("ed"))
        self.base = frozenset(vb - vbd - vbn - adj)  # a base form (maybe also a noun)
        self.base_verb = frozenset(self.base - nn)  # a base form that is no noun
        self.third = frozenset(vbz - nn)  # a third-person form (maybe also a plural noun)
        self.ing = frozenset(vbg - nn - adj)
        self.plural = frozenset(nns - nn - adj - vb)  # a plural noun that is never singular
        self.plural_noun = frozenset(self.plural - vbz)  # ... and no verb's third-person form


def _adverb(word: str) -> str:
    if word.endswith("le"):
        return word[:-1] + "y"
    if word.endswith("y"):
        return word[:-1] + "ily"
    return word + "ly"


def _regular(lemma: str) -> set[str]:
    """The regular past forms spelling might give a verb: +ed, +d, y -> ied, a doubled consonant."""
    if lemma.endswith("e"):
        return {lemma + "d"}
    out = {lemma + "ed"}
    if lemma.endswith("y") and len(lemma) > 2 and lemma[-2] not in "aeiou":
        out.add(lemma[:-1] + "ied")
    if len(lemma) >= 3 and lemma[-1] not in "aeiouwxy" and lemma[-2] in "aeiou" and lemma[-3] not in "aeiou":
        out.add(lemma + lemma[-1] + "ed")
    return out


def violations(toks: list[str], wc: Classes | None = None) -> list[tuple[str, str, str]]:
    """The violations among a piece's tokens: (rule, word, next word) for each (module doc)."""
    wc = wc or classes()
    out: list[tuple[str, str, str]] = []
    if not wc.regular.isdisjoint(toks):
        out = [("regular", t, "") for t in toks if t in wc.regular]
    # only pairs that start on a rule's first word or end on is/was/has/does can break a rule: one
    # pass over the pairs in a comprehension finds them, most pieces have a few
    first, last = TRIGGERS, BE_SINGULAR
    for i in [i for i, (a, b) in enumerate(zip(toks, toks[1:])) if a in first or b in last]:
        a, b = toks[i], toks[i + 1]
        prev = toks[i - 1] if i else ""
        rule = ""
        if a in BE:
            if b == "been":
                rule = "been"
            elif b in (wc.base if a == "am" else wc.base_verb) and b not in wc.adverb_of:
                rule = "base"
        elif a in HAVE:
            if b in wc.past_only:
                rule = "perfect"
        elif a in DO:
            if b in wc.past_only or b in wc.third or (b == "be" and a not in IMPERATIVE_DO):
                rule = "do"
        elif a in MODALS or (a in MODALS_NOUN and prev in SUBJECTS):
            if b == "to" or b in wc.past_only or b in wc.third:
                rule = "modal"
        elif a in SUBJECTS:
            rule = _subject(a, b, prev, wc)
        elif a in COUNTERS:
            if b in wc.plural_noun:
                rule = "article"
        elif (
            b in BE_SINGULAR
            and (a in wc.plural_noun or (a in wc.plural and prev in DETERMINERS))
            and _heads(toks, i, wc)
        ):
            rule = "plural"
        if rule:
            out.append((rule, a, b))
    return out


def _heads(toks: list[str], i: int, wc: Classes) -> bool:
    """Whether the plural noun toks[i] can head the subject of the verb after it: no preposition,
    number or -ing form between it and its clause's start (MODIFIERS, CLAUSE)."""
    for t in reversed(toks[max(0, i - LOOKBACK) : i]):
        if t in ("and", "or"):  # "routines and networks has": the coordination goes on
            continue
        if t in CLAUSE or not t[0].isalpha():
            return not t[0].isdigit()
        if t in MODIFIERS or t in wc.ing:
            return False
    return True


def _subject(a: str, b: str, prev: str, wc: Classes) -> str:
    inverted = prev in INVERTERS
    if a in PLURAL_SUBJECTS:
        if (b in BE_SINGULAR and not (a == "i" and b == "was")) or b in wc.third:
            return "number"
    elif a == "you":
        if b in BE_SINGULAR:
            return "number"
        return ""
    elif a in THIRD:
        if not inverted and (b in NOT_AFTER_HE or (b in wc.base and b not in SEMI_MODALS and b not in wc.adverb_of)):
            return "number"
    elif a == "it":  # "tests that need it are skipped": "it" is an object as often as a subject
        return ""
    if a != "thou" and not inverted:
        if b in wc.ing:
            return "ing"
        if b == "not":
            return "not"
    return ""


def count(toks: list[str], wc: Classes | None = None) -> int:
    return len(violations(toks, wc))


def data_root() -> Path:
    """lemminflect's package folder, found without importing the package."""
    return package_dir("lemminflect", "the grammar check needs its tables")


@functools.cache
def classes() -> Classes:
    """The word classes, read once."""
    from judges.open_world.flow import counts

    return Classes(data_root(), frozenset(counts().logc))
