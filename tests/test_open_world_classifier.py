"""The open-world judge's style classifier (judges/open_world/classifier.py, issue 29): a small model
shipped in the repository, read the same way in training and in the judge, consulted only where the
markers are weak or split, and never on the generator's pieces."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from judges.open_world.classifier import (
    CLASSES,
    DENSE,
    MODEL_PATH,
    dense_features,
    model,
    sparse_features,
)
from judges.open_world.judge import MARKER_GATE, OpenWorldJudge, combined_style, gated_style
from judges.open_world.styles import style_scores
from judges.open_world.text import normalise, tokens, words_of
from testbed.types import JudgeRequest
from testbed.world import STYLES, TOPICS, generate

ROOT = Path(__file__).resolve().parents[1]
ALL = tuple(STYLES)


def _req(text: str, topic: str, target: str = "plain") -> JudgeRequest:
    return JudgeRequest(f"write a short piece about {topic}. styles: {', '.join(ALL)}.", text, target, ALL, topic)


def test_the_shipped_model_is_small_and_knows_the_five_styles():
    assert MODEL_PATH.stat().st_size < 2_000_000
    m = model()
    assert m is not None and set(CLASSES) == set(STYLES)
    assert m.weights.shape == (m.n_sparse + len(DENSE) + 1, len(CLASSES))


def test_the_judge_reads_the_features_training_reads():
    """StyleModel.rows (a memo per token) is the known part of sparse_features (what training reads)."""
    m = model()
    assert m is not None
    rows = [json.loads(line) for line in (ROOT / "judges/data/open_world_voices_dev.jsonl").open()]
    for r in rows[:60]:
        toks = tokens(normalise(r["text"]))
        words = words_of(toks)
        assert m.rows(toks) == {m.index[f] for f in sparse_features(toks, words) if f in m.index}
        scores, _, _ = style_scores(Counter(words), normalise(r["text"]))
        probs = m.probs(m.rows(toks), dense_features(toks, words, scores, 1.5))
        assert abs(sum(probs) - 1.0) < 1e-9 and len(probs) == len(CLASSES)


def test_the_combinations():
    probs = [0.1, 0.1, 0.1, 0.6, 0.1]  # classical by the classifier
    assert combined_style(probs, "plain", 0.0) == "classical"
    assert combined_style(probs, "plain", 2.0) == "plain"  # log(0.6/0.1) < 2
    assert gated_style(probs, "plain", 0.5) == "classical"  # markers weak: the classifier
    assert gated_style(probs, "mixed", 2.0) == "classical"  # markers split: the classifier
    assert gated_style(probs, "cute", 1.2, 1.0) == "cute"  # markers name a style: the markers


def test_the_verdict_names_the_signal_that_decided():
    judge = OpenWorldJudge()
    marked = "Kneel before the cake, mortals! Its flames were foretold in the abyss! Fuhahaha!"
    v = judge.score(_req(marked, "a birthday party", "chuunibyou"))
    assert v.style == "chuunibyou" and "by=markers" in v.raw, v.raw
    ballad = (
        "My faithful hound lies by the fire, his muzzle grey with years; he followed me through field "
        "and fen, through gladness and through tears."
    )
    v = judge.score(_req(ballad, "dogs", "classical"))
    assert "by=classifier p=" in v.raw and "markers_say=" in v.raw, v.raw
    off = OpenWorldJudge(classifier=False).score(_req(ballad, "dogs", "classical"))
    assert "by=markers" in off.raw and off.reasons == v.reasons  # quality does not depend on it


def test_the_generators_pieces_are_decided_by_the_markers_alone():
    judge, markers_only = OpenWorldJudge(), OpenWorldJudge(classifier=False)
    rng = random.Random(11)
    for i in range(100):
        text = generate(STYLES[i % len(STYLES)], TOPICS[i % len(TOPICS)], rng)
        req = _req(text, TOPICS[i % len(TOPICS)], STYLES[i % len(STYLES)])
        v = judge.score(req)
        assert "by=markers" in v.raw
        assert (v.style, v.quality, v.reasons) == (lambda w: (w.style, w.quality, w.reasons))(markers_only.score(req))


@pytest.mark.parametrize("blas_core", ["", "Prescott"])
def test_the_shipped_model_is_what_the_training_script_writes(tmp_path, blas_core):
    """benchmarks/train_style_classifier.py --write trains on the original corpus and the nine voices
    sets and writes the weights byte for byte as shipped (no time stamp, no randomness), on any
    processor: under the BLAS kernels OpenBLAS picks for this one, and under its SSE baseline ones
    (float32 training once wrote other float16 weights on another AVX-512 machine)."""
    out = tmp_path / "model.npz"
    script = ROOT / "benchmarks" / "train_style_classifier.py"
    env = {**os.environ, "OPENBLAS_CORETYPE": blas_core}
    subprocess.run(
        [sys.executable, str(script), "--write", "--out", str(out)], check=True, capture_output=True, env=env
    )
    assert out.read_bytes() == MODEL_PATH.read_bytes()


def test_register_features_read_register_without_markers():
    """The dense register features (DENSE's second line) set formal prose apart from chat."""
    formal = tokens(normalise("The ledgers, whose condition is poor, thus permit only a partial reconstruction."))
    chat = tokens(normalise("we didn't go, you know? it's fine lol"))
    f, c = (dict(zip(DENSE, dense_features(t, words_of(t), [0.0] * 4, 1.5))) for t in (formal, chat))
    assert len(f) == len(DENSE) == 17
    assert f["longword"] > c["longword"] and f["latinate"] > c["latinate"] and f["formal"] > c["formal"]
    assert c["contraction"] > f["contraction"] == 0 and c["second"] > f["second"] == 0
    assert f["sentence"] > c["sentence"] and f["types"] == 1.0


def test_markers_with_little_mass_leave_the_decision_to_the_classifier():
    probs = [0.1, 0.1, 0.1, 0.6, 0.1]
    assert MARKER_GATE == 1.5
    assert gated_style(probs, "cute", 1.2) == "classical"  # a style named with 1.2 x the plain mass
    assert gated_style(probs, "cute", 1.6) == "cute"
