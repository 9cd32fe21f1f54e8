"""The open-world judge's word flow (judges/open_flow.py): the counts ship in the symspellpy wheel
and load; flow on a hand-computed case; word salad fails fluency at short lengths while fluent
pieces in unusual registers pass; doubled words still fail though the bigram list holds "the the";
pieces in the world's vocabulary are judged as before. None of these pieces is in a hand-written
set."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from judges.open_flow import BIGRAM_FLOOR, BIGRAMS, FLOW_PAIRS, UNIGRAMS, Flow, counts, data_root
from judges.open_world import DISORDER_PMI, FLOW_MIN, FUNCTION_MIN, OpenWorldJudge
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


def test_doubled_words_still_fail_though_the_bigram_list_holds_them():
    assert counts().pmi[("the", "the")] < DISORDER_PMI
    v = verdict("On sunday we walked to the the river and watched the boats drift slowly past the old mill.")
    assert v.reasons == ("fluency",) and field(v.raw, "disorder") == "1", v.raw


def test_broken_grammar_in_common_words_fails():
    # beyond the bigram counts (flow passes it); the grammar rules (judges/open_grammar.py) catch
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
