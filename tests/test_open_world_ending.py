"""The open-world judge's ending check (judges/open_world/text.py: proper_ending, signs_off) against a
sign-off line, and the closing-line rule measured for it in benchmarks/train_ending.py: the rule
passes a sign-off ("... Love Nana xx") and fails a piece cut mid-sentence on "the", but it also
passes a piece cut two words into a new sentence, which is why the judge does not use it
(docs/environments.md). None of these pieces is in a hand-written set."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from judges.open_world.judge import OpenWorldJudge
from judges.open_world.text import normalise, proper_ending, signs_off, tokens
from testbed.types import JudgeRequest

ROOT = Path(__file__).resolve().parents[1]
START = (
    "Had a lovely morning at the garden centre with my granddaughter. We bought a little pot of basil "
    "for the kitchen window"
)
SIGNED = START + " and shared a scone in the cafe 😊 Love Nana xx"
CUT_ON_THE = START + " and then we went to the"
CUT_EARLY = START + ". Then we went"


def _ending(text: str) -> tuple[str, ...]:
    req = JudgeRequest("write a short piece about gardening.", text, "plain", ("plain", "cute"), "gardening")
    return OpenWorldJudge(checks=("ending",)).score(req).reasons


def _train_ending():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("train_ending", ROOT / "benchmarks" / "train_ending.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_piece_cut_mid_sentence_fails_the_ending():
    assert _ending(CUT_ON_THE) == ("ending",)
    assert _ending(CUT_EARLY) == ("ending",)
    assert _ending(START + ".") == ()
    assert _ending(START + " hehe") == ()  # a chat interjection closes a piece outside the world's words


@pytest.mark.xfail(strict=True, reason="a sign-off with no stop reads as cut: the closing-line rule was not adopted")
def test_a_sign_off_line_passes_the_ending():
    assert _ending(SIGNED) == ()


def test_the_measured_closing_line_rule_on_hand_computed_cases():
    train = _train_ending()
    rule = (5, "bad_last")  # what leave-one-set-out chose on every fold without a cut budget
    toks = tokens(normalise(SIGNED))
    assert not proper_ending(toks) and not signs_off(toks)
    assert toks[-4:] == ["😊", "love", "nana", "xx"]  # 3 words after the emoji
    assert train.ends(toks, False, rule)
    assert not train.ends(toks, True, rule)  # never for a piece in the world's own words
    assert not train.ends(toks, False, (2, "bad_last"))  # 3 words > 2
    assert not train.ends(tokens(normalise(CUT_ON_THE)), False, rule)  # no stop in the last sentence
    assert not train.ends(tokens(normalise(START + ". Then we went to the")), False, rule)  # ends on "the"
    # the price: a piece cut two words into a new sentence reads as signed off
    assert train.ends(tokens(normalise(CUT_EARLY)), False, rule)
    assert not train.ends(tokens(normalise(CUT_EARLY)), False, (0, "none"))
