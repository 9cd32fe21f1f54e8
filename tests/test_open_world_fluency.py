"""The open-world judge's word flow (judges/open_world/flow.py): the counts ship in the symspellpy wheel
and load; flow on a hand-computed case; word salad fails fluency at short lengths while fluent
pieces in unusual registers pass; a doubled word is a disorder pair though the bigram list holds
"the the" (one alone in fluent prose no longer fails it); the joint rule on hand-computed cases;
pieces in the world's vocabulary are judged as before. None of these pieces is in a hand-written
set."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from judges.open_world.flow import BIGRAM_FLOOR, BIGRAMS, FLOW_PAIRS, UNIGRAMS, Flow, counts, data_root
from judges.open_world.judge import (
    DISORDER_COST,
    DISORDER_PMI,
    FLOW_MIN,
    FUNCTION_MIN,
    GRAMMAR_COST,
    GRAMMAR_RATE,
    OpenWorldJudge,
    fluent,
)
from testbed.types import JudgeRequest
from testbed.world import generate

FLUENCY_ONLY = ("fluency",)


def verdict(text: str, checks: tuple[str, ...] = FLUENCY_ONLY):  # type: ignore[no-untyped-def]
    return OpenWorldJudge(checks=checks).score(JudgeRequest("write a short piece.", text, "plain", ("plain",), ""))


def field(raw: str, name: str) -> str:
    m = re.search(rf"\b{name}=(\S+)", raw)
    assert m, raw
    return m.group(1)


def test_the_counts_ship_in_the_wheel_and_load():
    root = data_root()
    assert (root / UNIGRAMS).is_file() and (root / BIGRAMS).is_file()
    fc = counts()
    assert len(fc.logc) > 80_000 and len(fc.pmi) > 240_000
    assert fc.pmi[("of", "the")] > 0.0  # English binds its commonest pair
    assert fc.pmi[("the", "the")] < 0.0  # listed (web text stutters), yet rarer than chance


def test_flow_on_a_hand_computed_case(tmp_path: Path):
    (tmp_path / UNIGRAMS).write_text("x 1000000000\ny 1000000000\n")
    (tmp_path / BIGRAMS).write_text("x y 10000000\n")
    fc = Flow(tmp_path)
    n = 2e9
    listed = math.log(1e7 * n / 1e18)  # PMI of "x y": log(0.02)
    unlisted = math.log(BIGRAM_FLOOR * n / 1e18)  # "y x" is bounded by the floor: log(0.0128) < 0
    assert fc.flow("x y x y x".split()) == pytest.approx((2 * listed + 2 * unlisted) / 4)
    # a mark breaks the chain: "x ," and ", y" are not scored
    assert fc.flow(["x", ",", "y", "x", "y", "x", "y"]) == pytest.approx((2 * unlisted + 2 * listed) / 4)
    assert fc.flow("x y x y".split()) is None  # three pairs < FLOW_PAIRS
    assert FLOW_PAIRS == 4
    # a pair of rare words (the floor's bound positive) never earns credit
    (tmp_path / UNIGRAMS).write_text("p 10\nq 10\n")
    (tmp_path / BIGRAMS).write_text("")
    assert Flow(tmp_path).flow("p q p q p".split()) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "Lantern quietly the spoon of bicycle green whisper a under cloud tomorrow.",
        "Abyss eternal the sealed of chains awaken my crimson a destiny mortal.",
        "Kettle porridge the of slipper gently garden a blue ladder sunday.",
        pytest.param(  # salad built of attested fragments ("the framework of", "a lunch"): flow 1.8
            "Variance participants the framework of notably spreadsheet a lunch corridor.",
            marks=pytest.mark.xfail(strict=True, reason="flow is a mean: a few fluent fragments lift it"),
        ),
    ],
)
def test_short_word_salad_fails_on_flow(text: str):
    v = verdict(text)
    assert v.reasons == ("fluency",), v.raw
    # enough function words for the older part of the check: flow fails it
    assert float(field(v.raw, "function")) >= FUNCTION_MIN
    assert float(field(v.raw, "flow")) < FLOW_MIN


@pytest.mark.parametrize(
    "text",
    [
        # classical, old spelling
        "Hark, good friend, and attend unto my tale: the morning tea was poured ere the sun had risen, "
        "and thou wouldst have wept to see how fair the steam did curl above the cup.",
        # chat register, cute
        "omg the tiny kitten fell asleep on my keyboard again hehe and now my essay just says jjjjjjjj lol "
        "but i can't be mad, she's too cute ^_^",
        # plain, a careful non-native writer
        "Every morning I take the bus to my office. It is crowded, but I like to look at the city from the "
        "window. Sometimes I read a book, and the time passes very fast.",
        # chuunibyou exclamations
        "Kukuku! Tremble, mortals! The sealed power within my right arm awakens once more, and the darkness "
        "itself bows before my crimson eyes! None shall escape my judgement!",
        # closed-class pairs the hand list calls disorder but English attests ("for I", "in and")
        "I stayed home, for I was tired. The rain came in and soaked the mat, so I put my boots on and went out.",
    ],
)
def test_fluent_pieces_in_unusual_registers_pass(text: str):
    v = verdict(text)
    assert v.quality == 1, v.raw
    assert float(field(v.raw, "flow")) >= FLOW_MIN


def test_a_doubled_word_is_a_disorder_pair_though_the_bigram_list_holds_it():
    assert counts().pmi[("the", "the")] < DISORDER_PMI
    v = verdict("On sunday we walked to the the river and watched the boats drift slowly past the old mill.")
    assert field(v.raw, "disorder") == "1", v.raw
    # one pair raises the flow this piece needs to FLOW_MIN + DISORDER_COST; its flow is well over
    assert float(field(v.raw, "flow")) >= FLOW_MIN + DISORDER_COST


@pytest.mark.xfail(
    strict=True,
    reason="one disorder pair in fluent prose no longer fails alone: the joint fluency rule trades it "
    "for colloquial and old-fashioned pieces (docs/environments.md)",
)
def test_one_doubled_word_in_fluent_prose_fails():
    v = verdict("On sunday we walked to the the river and watched the boats drift slowly past the old mill.")
    assert v.reasons == ("fluency",), v.raw


@pytest.mark.parametrize(
    "disorder, flow, grammar, words, ok",
    [
        # the world's own vocabulary (grammar None): only the disorder pairs count
        (0, None, None, 30, True),
        (1, None, None, 30, False),
        # no flow (too few pairs): any disorder pair fails
        (0, None, [], 8, True),
        (1, None, [], 8, False),
        # flow against FLOW_MIN 1.4 + 0.5 a disorder pair + 1.5 a violation
        (0, 1.39, [], 40, False),
        (0, 1.41, [], 40, True),
        (1, 1.85, [], 40, False),  # bar 1.9
        (1, 1.95, [], 40, True),
        (2, 2.35, [], 40, False),  # bar 2.4
        (2, 2.45, [], 40, True),
        (0, 2.85, [("number", "she", "go")], 40, False),  # bar 2.9; 1 in 40 is under GRAMMAR_RATE 0.04
        (0, 2.95, [("number", "she", "go")], 40, True),
        (1, 3.35, [("number", "she", "go")], 40, False),  # bar 3.4
        (1, 3.45, [("number", "she", "go")], 40, True),
        # GRAMMAR_RATE: 2 violations in 50 words reach 0.04 a word, whatever the flow
        (0, 5.0, [("number", "she", "go"), ("ing", "we", "eating")], 50, False),
        (0, 5.0, [("number", "she", "go"), ("ing", "we", "eating")], 51, True),
    ],
)
def test_the_joint_fluency_rule_by_hand(disorder, flow, grammar, words, ok):  # type: ignore[no-untyped-def]
    assert (FLOW_MIN, DISORDER_COST, GRAMMAR_COST, GRAMMAR_RATE) == (1.4, 0.5, 1.5, 0.04)
    assert fluent(disorder, flow, grammar, words) is ok


def test_broken_grammar_in_common_words_fails():
    # beyond the bigram counts (flow passes it); the grammar rules (judges/open_world/grammar.py) catch
    # "she go" and "we eating": 2 violations in 20 words, over GRAMMAR_RATE
    v = verdict("Yesterday my sister she go the bakery for buying of bread but bakery it closed was so we eating rice.")
    assert v.reasons == ("fluency",), v.raw
    assert float(field(v.raw, "flow")) >= FLOW_MIN and field(v.raw, "grammar").startswith("2[")


def test_world_vocabulary_pieces_are_judged_without_flow():
    rng = random.Random(3)
    for style in ("academic", "cute", "chuunibyou", "classical", "plain"):
        v = verdict(generate(style, "coffee", rng))
        assert field(v.raw, "flow") == "none"
        assert v.quality == 1, v.raw
