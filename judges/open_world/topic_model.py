"""A learned topic signal for the open-world judge (issue 29): which of the world's 36 topics a
piece's words are nearest, as a multinomial logistic regression over the piece's mean word vector,
learned from the project's own hand-written pieces. judges/open_world/topics.py consults it only where the
similarity to the description is borderline (module doc there).

The description similarity reads word by word; a piece told as a scene ("the 6:15 was packed",
"whites, then darks") has no word that names its topic, only many that lean toward it. The mean
of its word vectors keeps that lean, and a model trained on pieces of every topic learns where in
the 50-d space each topic's pieces fall, against the other 35 (which is what a neighbouring topic
needs: tea and coffee share the kettle and the cup, and differ in where the whole piece sits).

Features of a piece (`piece_vector`): the mean of the unit GloVe vectors (judges/open_world/vectors.py) of
its distinct content words (no function word, none of the COMMON most frequent words, a possessive as
its noun), scaled to unit length, then a bias. Weighting each word by smooth inverse frequency
(a / (a + p(word)), a = 1e-4) was tried and did no better in cross-validation (587 against 591 of 617
good pieces on topic at the chosen rule), so the mean is plain.

The weights (judges/data/open_topic_model.npz, [51, 36] float32, 11 KB) are written by
benchmarks/train_topic_model.py, deterministically and alike on every processor (300 full-batch
Adam steps from zero in float64, L2 1e-4),
from the good pieces of every hand-written set (the original corpus and the six voices sets, 677
pieces); the same script reports the leave-one-set-out cross-validation that chose the model and the
rule of judges/open_world/topics.py that uses it. Inference is one memo look-up per word, a sum of a few
tens of rows and a [51] x [51, 36] product: a few microseconds, paid only for a piece below
TOPIC_MIN.

A piece about a subject that is no world topic but neighbours one (a bookshop asked about the
library, autumn leaves asked about the first snow) passes: the asked topic is the model's nearest
class. Neighbouring-topic negatives were tried over all eight voices sets (a 37th "other" class
trained on the off-topic pieces, beside every odds ratio and similarity floor in the grid): "other"
learns "far from every topic" and rejects none of the three neighbours of sets 6-7 without losing good
pieces, so the model keeps its 36 classes (docs/environments.md, "Neighbouring topics and sign-offs").
"""

from __future__ import annotations

import functools
from collections.abc import Set as AbstractSet
from pathlib import Path

import numpy as np

from judges.open_world.text import FUNCTION_WORDS
from judges.open_world.vectors import COMMON, table
from testbed.world.topics import TOPICS

MODEL_PATH = Path(__file__).resolve().parents[1] / "data" / "open_topic_model.npz"  # judges/data/
TOPIC_INDEX: dict[str, int] = {t: i for i, t in enumerate(TOPICS)}
_ROWS: dict[str, int] = {}  # word -> its table row, or -1 (no vector, or a function word)
MEMO_MAX = 100_000


def piece_vector(words: AbstractSet[str]) -> np.ndarray:
    """The mean unit vector of the distinct content `words` (module doc), with a trailing 1.0 (the
    bias): [51] float32; all zeros but the bias when no word has a vector."""
    if any(w.endswith("'s") for w in words):
        words = {w[:-2] if w.endswith("'s") else w for w in words}
    memo = _ROWS
    try:
        found = list(map(memo.__getitem__, words))
    except KeyError:
        if len(memo) > MEMO_MAX:
            memo.clear()
        index = table()[0]
        for w in words:
            if w not in memo:
                memo[w] = -1 if w in FUNCTION_WORDS else index.get(w, -1)
        found = list(map(memo.__getitem__, words))
    # sorted: a set's order changes with the process's hash seed, and a float sum's with the order
    rows = sorted(i for i in found if i >= COMMON)
    out = np.zeros(51, dtype=np.float32)
    out[50] = 1.0
    if rows:
        v = np.add.reduce(table()[1][rows])
        out[:50] = v / max(float(np.sqrt(v @ v)), 1e-6)
    return out


class TopicModel:
    """Weights [51, len(TOPICS)] of a multinomial logistic regression over piece_vector."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = np.ascontiguousarray(weights, dtype=np.float32)
        if self.weights.shape != (51, len(TOPICS)):
            raise ValueError(f"topic model weights {self.weights.shape} != (51, {len(TOPICS)})")

    def logits(self, words: AbstractSet[str]) -> np.ndarray:
        return piece_vector(words) @ self.weights

    def save(self, path: Path) -> None:
        np.savez(path, weights=self.weights, classes=np.array(TOPICS))


@functools.cache
def topic_model() -> TopicModel | None:
    """The shipped model, loaded on first use; None if the file is absent."""
    if not MODEL_PATH.exists():
        return None
    with np.load(MODEL_PATH) as z:
        if tuple(z["classes"].tolist()) != TOPICS:
            raise ValueError(f"{MODEL_PATH}: written for other topics than the world's")
        return TopicModel(z["weights"])
