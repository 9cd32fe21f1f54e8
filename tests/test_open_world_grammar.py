"""The open-world judge's grammar rules (judges/open_world/grammar.py): the lemminflect tables ship in the
wheel and load; each rule finds its violation in a hand-made sentence, and the same words in correct
English are not flagged (agreement past "of", a number or an -ing subject, singular -s nouns,
inversion, the subjunctive, imperatives); the judge fails a piece at GRAMMAR_RATE violations per word
and shows them in the verdict; pieces in the world's vocabulary get no grammar. None of these
sentences is in a hand-written set."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

import pytest

from judges.open_world.grammar import INFLECTIONS, OVERRIDES, Classes, classes, count, data_root, violations
from judges.open_world.judge import GRAMMAR_RATE, OpenWorldJudge
from judges.open_world.text import normalise, tokens, words_of
from testbed.types import JudgeRequest
from testbed.world import generate


def found(text: str) -> list[tuple[str, str, str]]:
    return violations(tokens(normalise(text)))


def verdict(text: str):  # type: ignore[no-untyped-def]
    return OpenWorldJudge(checks=("fluency",)).score(
        JudgeRequest("write a short piece.", text, "plain", ("plain",), "")
    )


def test_the_tables_ship_in_the_wheel_and_load():
    root = data_root()
    assert (root / INFLECTIONS).is_file() and (root / OVERRIDES).is_file()
    wc = classes()
    assert {"went", "ate", "came"} <= wc.past_only and "lied" not in wc.past_only  # a regular past never is
    assert {"vendors", "participants"} <= wc.plural and not {"news", "sheep", "series", "data"} & wc.plural
    assert {"buyed", "eated", "goed", "teached"} <= wc.regular
    assert not {"learned", "dreamed", "hanged", "lied", "burned"} & wc.regular  # regular variants are English
    assert "complete" in wc.adverb_of  # "completely": an adjective the tables list only as a verb


def test_classes_on_a_hand_made_table(tmp_path: Path):
    (tmp_path / "resources").mkdir()
    with gzip.open(tmp_path / INFLECTIONS, "wt", encoding="utf-8") as f:
        f.write("zib,verb,zob,zobben,zibbing,zibs\nglup,verb,glupped,,glupping,glups\nwug,noun,wugs\n")
    (tmp_path / OVERRIDES).write_text("")
    wc = Classes(tmp_path, frozenset())
    # zib's regular pasts, plain and with the consonant doubled; glup is regular: none
    assert wc.past_only == {"zob"} and wc.regular == {"zibed", "zibbed"}
    assert wc.plural == {"wugs"} and wc.base_verb == {"zib", "glup"} and wc.third == {"zibs", "glups"}
    assert count("the wugs was here and she has zob and I zibbed".split(), wc) == 3


@pytest.mark.parametrize(
    ("text", "rules"),
    [
        ("The vendors was angry.", ["plural"]),
        ("The prices is been higher.", ["plural", "been"]),
        ("She has went to the shop.", ["perfect"]),
        ("He did went home and it does goes on.", ["do", "do"]),
        ("I will to try again and we should to go.", ["modal", "modal"]),
        ("We was happy and they goes home.", ["number", "number"]),
        ("Then she send me a letter.", ["number"]),
        ("The sun is consume the sky and I am go home.", ["base", "base"]),
        ("I not know why we eating rice.", ["not", "ing"]),
        ("She ate a cookies.", ["article"]),
        ("I buyed bread and eated it.", ["regular", "regular"]),
    ],
)
def test_each_rule_finds_its_violation(text: str, rules: list[str]):
    assert [r for r, _, _ in found(text)] == rules


@pytest.mark.parametrize(
    "text",
    [
        "The news was good and the series is over.",  # singular nouns in -s
        "A number of students were late, and one of the vendors was rude.",  # the head comes before "of"
        "Ten dollars is a lot for a sandwich.",  # a measure: singular
        "Erosion at recreational beaches is often ignored, and scrubbing the pots is a joy.",
        "What it shows is the mechanism, and whatever he does is fine.",  # a verb, not a plural noun
        "Does she have a cat? Let him go. If he were here, he would help.",  # inversion, subjunctive
        "Don't be afraid; the results of the study were clear.",  # imperative
        "She has gone to the shop and I bought some bread; he learned and dreamed.",
        "She herself said so, and he just smiled; she even sang, and he will come.",
        "The sheep is in the field and the data are noisy.",
        "The work is complete and the room is clean.",  # adjectives that are also verbs
    ],
)
def test_correct_english_with_the_same_words_is_not_flagged(text: str):
    assert found(text) == []


def test_the_judge_fails_a_piece_at_the_rate_and_shows_the_violations():
    bad = "The vendors was angry because the prices is been higher and we was tired of it all."
    v = verdict(bad)
    assert v.reasons == ("fluency",), v.raw
    m = re.search(r"\bgrammar=(\d+)\[(\S*)\]", v.raw)
    assert m and int(m.group(1)) == 4 and "been:is_been" in m.group(2), v.raw
    assert GRAMMAR_RATE * len(words_of(tokens(normalise(bad)))) <= 4
    # one slip in a long fluent piece stays under the rate (1 in 40 words)
    good = (
        "Every morning I take the bus to my office. It is crowded, but I like to look at the city from the "
        "window. Sometimes I read a book, and the time passes very fast. The vendors was already out when "
        "I arrived, selling coffee and warm bread to the people who work in the tall buildings nearby."
    )
    v = verdict(good)
    assert v.quality == 1 and "grammar=1[" in v.raw, v.raw
    assert (
        verdict("Every morning I take the tram to my office and read a novel on the way.").raw.count("grammar=0 ") == 1
    )


def test_world_vocabulary_pieces_get_no_grammar():
    rng = random.Random(5)
    for style in ("academic", "cute", "chuunibyou", "classical", "plain"):
        v = verdict(generate(style, "coffee", rng))
        assert "grammar=none " in v.raw and v.quality == 1, v.raw
