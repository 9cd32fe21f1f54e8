"""The open-world judge's topic model (judges/open_world/topic_model.py, issue 29): a small model shipped in
the repository and written by benchmarks/train_topic_model.py, consulted only below TOPIC_MIN for a
piece with words outside the world's vocabulary; a scene passes, a neighbouring topic does not, the
generator's pieces are judged as before."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

import judges.open_world.topics as open_topics
from judges.open_world.judge import OpenWorldJudge
from judges.open_world.text import normalise, tokens, words_of
from judges.open_world.topic_model import MODEL_PATH, piece_vector, topic_model
from judges.open_world.topics import TOPIC_MIN, field_on_topic, topic_decision, topicality
from testbed.types import JudgeRequest
from testbed.world import STYLES, TOPICS, generate

ROOT = Path(__file__).resolve().parents[1]
ALL = tuple(STYLES)


def _words(text: str) -> set[str]:
    return set(words_of(tokens(normalise(text))))


def _req(text: str, topic: str, target: str = "plain") -> JudgeRequest:
    return JudgeRequest(f"write a short piece about {topic}. styles: {', '.join(ALL)}.", text, target, ALL, topic)


def _rows(*ids: str) -> dict[str, dict]:
    out = {}
    for path in sorted((ROOT / "judges" / "data").glob("open_world_*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip() and json.loads(line)["id"] in ids:
                out[json.loads(line)["id"]] = json.loads(line)
    assert set(out) == set(ids)
    return out


@pytest.fixture(scope="module")
def judge() -> OpenWorldJudge:
    return OpenWorldJudge()


def test_the_shipped_model_is_small_and_knows_the_worlds_topics():
    assert MODEL_PATH.stat().st_size < 2_000_000
    m = topic_model()
    assert m is not None and m.weights.shape == (51, len(TOPICS))
    with np.load(MODEL_PATH) as z:
        assert tuple(z["classes"].tolist()) == TOPICS


def test_the_shipped_model_is_what_the_training_script_writes():
    spec = importlib.util.spec_from_file_location("train_topic_model", ROOT / "benchmarks" / "train_topic_model.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    data = train.load()
    weights = train.fit([p for s in train.SHIPPED for p in data[s]])
    m = topic_model()
    assert m is not None
    np.testing.assert_allclose(weights, m.weights, atol=1e-4)


def test_the_piece_vector_is_the_mean_of_its_content_words():
    v = piece_vector({"kettle", "the", "teapot's", "of"})
    assert v[50] == 1.0 and abs(float(np.linalg.norm(v[:50])) - 1.0) < 1e-5
    assert np.array_equal(v, piece_vector({"teapot", "kettle"}))
    assert np.array_equal(piece_vector({"the", "of", "and"}), np.eye(51, dtype=np.float32)[50])


def test_a_scene_that_failed_on_topic_now_passes_and_says_why(judge):
    """Held-out pieces of sets 2-5 told as scenes: the description alone failed them."""
    for row in _rows("h3-074-demonlord", "h5-122-larper", "h2-016-bard").values():
        words = _words(row["text"])
        weight = topicality(words, row["topic"])
        assert weight < TOPIC_MIN and not field_on_topic(words, row["topic"], weight), row["id"]
        on, by = topic_decision(words, row["topic"], weight)
        assert on and by.startswith("model p="), (row["id"], by)
        v = judge.score(_req(row["text"], row["topic"], row["style"]))
        assert "topic" not in v.reasons and "topic_by=model p=" in v.raw, v.raw


def test_a_scene_written_after_training_passes(judge):
    """Pieces in no data set, written after the model was trained."""
    for topic, text in (
        (
            "the laundry",
            "Whites, then darks, then the towels nobody owns. The drum thumped and spun while I folded last week's lot on the bed.",
        ),
        (
            "a long nap",
            "Lay down for ten minutes after lunch and woke at half five with the cushion pattern printed on my cheek.",
        ),
    ):
        words = _words(text)
        weight = topicality(words, topic)
        assert not field_on_topic(words, topic, weight), topic
        v = judge.score(_req(text, topic))
        assert "topic" not in v.reasons and "topic_by=model p=" in v.raw, v.raw
        for other in ("the library", "the beach", "homework"):
            assert "topic" in judge.score(_req(text, other)).reasons, (topic, other)


def test_a_neighbouring_topic_still_fails(judge):
    tea = (
        "I warmed the pot, spooned in loose Assam and let it steep for four minutes before pouring it "
        "into Gran's china cup with a splash of milk."
    )
    assert "topic" not in judge.score(_req(tea, "tea")).reasons
    v = judge.score(_req(tea, "coffee"))
    assert "topic" in v.reasons and "topic_by=model" in v.raw, v.raw
    cat = _rows("h33")["h33"]  # the original corpus: a cat asked about dogs, which the model alone lets by
    assert cat["kind"] == "off_topic" and cat["topic"] == "dogs"
    words = _words(cat["text"])
    assert topicality(words, "dogs") < TOPIC_MIN and not topic_decision(words, "dogs", topicality(words, "dogs"))[0]
    assert "topic" in judge.score(_req(cat["text"], "dogs", cat["style"])).reasons


def test_the_worlds_own_pieces_are_judged_as_without_the_model(judge, monkeypatch):
    rng = random.Random(13)
    reqs = []
    for i in range(100):
        topic, style = TOPICS[i % len(TOPICS)], STYLES[i % len(STYLES)]
        text = generate(style, topic, rng)
        words = _words(text)
        for asked in (topic, TOPICS[(i + 5) % len(TOPICS)]):
            weight = topicality(words, asked)
            assert topic_decision(words, asked, weight) == (weight >= TOPIC_MIN, "field")
            assert field_on_topic(words, asked, weight) == (weight >= TOPIC_MIN)
            reqs.append(_req(text, asked, style))
    with_model = [judge.score(r) for r in reqs]
    monkeypatch.setattr(open_topics, "topic_model", lambda: None)
    without = [judge.score(r) for r in reqs]
    assert [(v.quality, v.reasons, v.style) for v in with_model] == [(v.quality, v.reasons, v.style) for v in without]
    assert all("topic_by=field" in v.raw for v in with_model)


def test_a_topic_outside_the_worlds_list_keeps_the_rule_before():
    """The model knows the world's 36 topics only: any other topic is judged by its description."""
    pieces = (
        ("We talked about space travel all night: rockets, orbits and the long dark between planets.", True),
        ("The capsule drifted past the moon while the crew slept in their bunks.", False),
        ("The knitting circle met on Tuesday and argued about yarn.", False),
    )
    for text, on in pieces:
        words = _words(text)
        for topic in ("space travel", "astronauts"):
            weight = topicality(words, topic)
            decided, by = topic_decision(words, topic, weight)
            assert decided == field_on_topic(words, topic, weight) and by in ("field", "near"), (text, topic, by)
        assert topic_decision(words, "space travel", topicality(words, "space travel"))[0] == on, text


AUTUMN = (
    "The maple in our yard has turned bright red and orange this week. I raked the fallen leaves into a "
    "big heap by the fence and the kids jumped in it until dinner."
)


def test_a_neighbouring_topic_outside_the_worlds_list_reaches_the_model(judge):
    words = _words(AUTUMN)
    w = topicality(words, "the first snow")
    assert 0.2 <= w < TOPIC_MIN  # borderline: the model decides
    assert "topic" in judge.score(_req(AUTUMN, "dogs")).reasons


@pytest.mark.xfail(
    strict=True,
    reason="autumn is no world topic: the model's nearest class is the first snow (p = 1.00); neither an "
    "'other' class trained on off-topic pieces nor any odds ratio or floor in the grid rejects it "
    "without losing good pieces (benchmarks/train_topic_model.py --cv over sets 1-7, docs/environments.md)",
)
def test_autumn_leaves_asked_about_the_first_snow_fail_on_topic(judge):
    assert "topic" in judge.score(_req(AUTUMN, "the first snow")).reasons
