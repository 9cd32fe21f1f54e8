"""Style archetypes: sentence templates, style lexicons and the judge's marker weights.

This module is pure data, shared by the generator (which writes with it) and the rubric judge
(which reads style markers and the grammar's bigrams from it).

Template syntax: plain lowercase text; `{slot}` is filled from the topic's lexicon (noun, thing,
place, act, adj), from COMMON (time, freq) or from the style's own lexicon. A piece is one
opener followed by one or two distinct bodies. Every opener names the topic ({noun}) and, for the
four marked styles, starts with (or very early has) a style marker; every body of a marked style
carries at least one marker, so each marked piece has at least two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

STYLES: tuple[str, ...] = ("academic", "cute", "chuunibyou", "classical", "plain")

# Kept whole by the tokenizer. None contains . , ! ? ; : so splitting stays trivial.
EMOTICONS: tuple[str, ...] = ("(^_^)", "(>_<)", "(^o^)", "(*^_^*)", "(=^_^=)", "(^w^)", "<3", "~")

# Slots shared by all styles.
COMMON: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "time": ("today", "this morning", "this afternoon", "this evening", "this weekend"),
        "freq": ("on weekends", "most days", "every evening", "now and then", "whenever possible"),
    }
)


@dataclass(frozen=True)
class StyleSpec:
    name: str
    openers: tuple[str, ...]
    bodies: tuple[str, ...]
    lexicon: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    markers: frozenset[str] = frozenset()  # words only this style uses; the judge counts them


def _words(s: str) -> frozenset[str]:
    return frozenset(s.split())


CUTE = StyleSpec(
    name="cute",
    openers=(
        "{c_int}, the {noun} is so {c_adj} {time}! {c_emo}",
        "{c_int}! {time} i got to {act} with the {c_adj} {noun}! {c_emo}",
        "sooo {c_adj}! the {noun} makes my heart go doki doki! {c_emo}",
        "{c_int} ~ look at this {c_adj} little {noun}!",
        "omg, {noun} time with my {c_pal}! {c_emo}",
        "{c_adj} {noun} and {c_adj} vibes, {c_int}!",
        "{c_int}, i love the {noun} sooo much! {c_emo}",
        "my {c_pal} says the {noun} is super {c_adj} ~ {c_int}!",
        "{c_int}! the {c_adj} {noun} is waiting for me in {place}.",
        "teehee, {time} is all about the {noun}! {c_emo}",
    ),
    bodies=(
        "the {thing} looks so {c_adj} {time}! {c_emo}",
        "i want to {act} with my {c_pal}, hehe!",
        "{place} feels super {c_adj} ~ {c_int}!",
        "every little {noun} deserves a big {c_adj} hug! {c_emo}",
        "we can {act} and giggle all day! {c_emo}",
        "the {adj} {thing} is my {c_adj} treasure ~ {c_int}!",
        "{c_int}, it is the most {c_adj} thing ever!",
        "so {adj} and so {c_adj}, i could squeal! {c_emo}",
        "i will {act} {freq}, {c_int}! {c_emo}",
        "let us {act} together, {c_pal}! {c_emo}",
        "my heart is full of {c_adj} sparkles! {c_emo}",
    ),
    lexicon=MappingProxyType(
        {
            "c_adj": (
                "tiny",
                "fluffy",
                "cozy",
                "sparkly",
                "squishy",
                "snuggly",
                "precious",
                "teeny",
                "cuddly",
                "twinkly",
            ),
            "c_int": ("yay", "hehe", "omg", "awww", "eee", "teehee"),
            "c_emo": tuple(e for e in EMOTICONS if e != "~"),
            "c_pal": ("bestie", "cutie", "sweetie", "snuggle buddy"),
        }
    ),
    markers=_words(
        "tiny fluffy cozy sparkly squishy snuggly precious teeny cuddly twinkly yay hehe omg awww eee teehee "
        "bestie cutie sweetie snuggle sooo doki giggle squeal sparkles"
    ),
)

CHUUNIBYOU = StyleSpec(
    name="chuunibyou",
    openers=(
        "{d_int}, the {noun} cannot escape {d_thing}!",
        "o darkness, hear me, for {time} i shall claim the {noun}!",
        "behold, mortals! the {noun} answers only to {d_thing}!",
        "{d_int}! {time} the {d_adj} {noun} awakens within me!",
        "{d_int}, by the pact of {d_thing}, i claim the {noun}!",
        "the {d_adj} {noun} has chosen me, as destiny foretold!",
        "fools! you know nothing of the {noun} and its {d_adj} power!",
        "{d_int}, my destiny is bound to the {noun}!",
        "{d_int}, none may touch the {noun} while {d_thing} still burns!",
    ),
    bodies=(
        "none may {act} without facing {d_thing}!",
        "the {thing} is merely a vessel of my {d_adj} power!",
        "{place} shall become my {d_adj} realm!",
        "destiny has chosen me to {act}, and the abyss agrees!",
        "even {d_thing} trembles before the {adj} {noun}!",
        "my sealed right arm aches whenever the {noun} is near!",
        "do you dare to {act} beside the chosen one of the abyss?",
        "{d_int}, the seal weakens {time}!",
        "the {adj} {thing} hides {d_adj} secrets, i can feel it.",
        "{freq} i {act}, for such is my {d_adj} fate!",
        "mortals cannot understand why i {act} in {place}.",
    ),
    lexicon=MappingProxyType(
        {
            "d_int": ("kukuku", "fuhahaha", "behold", "o darkness"),
            "d_adj": ("cursed", "forbidden", "eternal", "crimson", "demonic", "accursed"),
            "d_thing": (
                "the abyss",
                "my sealed right arm",
                "the eternal flame",
                "my crimson eye",
                "the forbidden seal",
                "the dragon within",
            ),
        }
    ),
    markers=_words(
        "kukuku fuhahaha behold darkness cursed forbidden eternal crimson demonic accursed abyss sealed "
        "destiny fate pact realm mortals seal dragon awakens vessel fools foretold"
    ),
)

CLASSICAL = StyleSpec(
    name="classical",
    openers=(
        "lo, the {noun} {k_verb} in {place}.",
        "alas, {time} i did {act}, and the {noun} was fair.",
        "hark! thou {adj} {noun}, how fair thou art.",
        "verily, the {noun} hath such {adj} grace.",
        "{k_int}, how sweetly the {noun} {k_verb} in {place}!",
        "{k_int}, thy {noun} is most {adj} {time}.",
        "methinks the {noun} doth please thee well.",
        "{k_int}, i have sought the {noun} since days of yore.",
    ),
    bodies=(
        "ere the sun doth set, i shall {act}.",
        "thy {thing} {k_verb} in {place}, {k_addr}.",
        "oft have i sought the {thing} in {place}.",
        "wherefore dost thou {act} {time}?",
        "the {adj} {noun} {k_verb} as in days of yore.",
        "come hither, {k_addr}, and let us {act}.",
        "methinks the {thing} is most {adj}.",
        "{k_int}, the {thing} {k_verb} yonder, and all is still.",
        "thou shalt {act} {freq}, as thy fathers did.",
        "such {adj} comfort hath the {thing}, {k_addr}.",
    ),
    lexicon=MappingProxyType(
        {
            "k_int": ("lo", "alas", "hark", "verily", "forsooth"),
            "k_verb": ("waiteth", "resteth", "shineth", "calleth", "lingereth", "abideth", "sleepeth", "beckoneth"),
            "k_addr": ("good sir", "fair maiden", "gentle friend", "sweet cousin"),
        }
    ),
    markers=_words(
        "thou thee thy thine doth dost hath ere alas lo verily hark yonder forsooth tis oft wherefore methinks "
        "hither whilst yore shalt nay maiden waiteth resteth shineth calleth lingereth abideth sleepeth beckoneth"
    ),
)

ACADEMIC = StyleSpec(
    name="academic",
    openers=(
        "{a_int}, the {noun} appears to play a significant role in daily life.",
        "the evidence indicates that the {noun} is {adj} in most cases.",
        "this analysis examines how people {act} and why the {noun} matters.",
        "preliminary findings suggest that the {noun} is more {adj} than expected.",
        "{a_src} {a_verb} a strong correlation between the {noun} and wellbeing.",
        "{a_int}, the {noun} can be understood within a broader framework.",
        "in this study, participants described the {noun} as {adj}.",
        "empirically, the {noun} is associated with the {thing}.",
    ),
    bodies=(
        "furthermore, participants who {act} report higher satisfaction.",
        "{a_src} {a_verb} a link between the {noun} and the {thing}.",
        "this suggests that {place} is a relevant variable.",
        "in summary, the {noun} merits further empirical study.",
        "{a_int}, the {adj} {thing} was observed in most cases.",
        "consequently, the hypothesis that people {act} {freq} is supported.",
        "{a_int}, {a_src} {a_verb} that the {thing} is {adj}.",
        "thus, the role of {place} should not be underestimated.",
        "further research should examine whether people {act} in {place}.",
    ),
    lexicon=MappingProxyType(
        {
            "a_int": ("notably", "furthermore", "moreover", "consequently", "additionally"),
            "a_src": (
                "the empirical evidence",
                "the observed data",
                "the preliminary findings",
                "this analysis",
                "recent literature",
            ),
            "a_verb": ("suggests", "indicates", "demonstrates", "implies"),
        }
    ),
    markers=_words(
        "notably furthermore moreover consequently additionally empirical empirically evidence observed data "
        "preliminary findings analysis literature suggests suggest indicates demonstrates implies hypothesis "
        "correlation significant participants variable summary thus hence framework examines examine research "
        "study wellbeing underestimated"
    ),
)

PLAIN = StyleSpec(
    name="plain",
    openers=(
        "{time} i thought about the {noun} for a while.",
        "the {noun} was {adj} {time}.",
        "i spent some time with the {noun} {time}.",
        "my friend and i talked about the {noun} {time}.",
        "{time} the {noun} was on my mind.",
        "i like the {noun} because it is {adj}.",
        "there was a lot to say about the {noun} {time}.",
        "the {noun} and the {thing} were both {adj} {time}.",
    ),
    bodies=(
        "it was a nice way to spend the day.",
        "the {thing} was {adj}, and that was fine.",
        "later i went to {place} to {act}.",
        "i think the {noun} is worth it.",
        "we usually {act} {freq}.",
        "after that i went home and rested.",
        "do you like the {noun} too?",
        "it is good to {act} {freq}.",
        "the {thing} in {place} was {adj}.",
        "i will {act} again soon.",
    ),
)

STYLE_SPECS: Mapping[str, StyleSpec] = MappingProxyType(
    {s.name: s for s in (ACADEMIC, CUTE, CHUUNIBYOU, CLASSICAL, PLAIN)}
)
assert tuple(STYLE_SPECS) == STYLES
