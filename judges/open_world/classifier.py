"""A small style classifier for the open-world judge, learned from the project's own hand-written
pieces (issue 29): a second signal beside the marker lexicons of judges/open_world/styles.py.

The markers fit the voices they were built beside; a register carried by metre, formulae or
situation (a ballad, a sermon, a knight's bravado) has few of them. The classifier reads what the
markers do not: which words and word endings a register uses, its punctuation, and the
markers' own masses, as a multinomial logistic regression over the five styles.

Features of a piece (`features`), all read from what the judge has already computed:
  w:WORD        each distinct word
  s:END / p:BEG each distinct word's last three and four letters and first three (words of five
                letters or more): endings carry register ("-eth", "-tion", "-ly") where whole words
                are too rare to have been seen
  t:TOKEN       each distinct token that is no word: marks, emoji, emoticons
and dense ones (`DENSE`): each marked style's share of the marker mass, the mass against the plain
threshold, the share of '!' and of first-person words, mean word length; and register carried by
no marker word (a formal writer with none of the academic markers, set 8's archivist): the share of
long and of Latinate words, words per sentence, contractions, commas, second-person words, formal
and archaic function words, distinct words, semicolons. Sparse features are present or absent (no
counts), the row scaled to unit length.

Trained on the good pieces of the original corpus and all nine scored voices sets (dev, heldout,
heldout2 ... heldout8); the register features and the judge's MARKER_GATE were chosen by
leave-one-set-out over those nine sets (docs/environments.md, "Style over nine sets").

Word pairs were tried and dropped: no gain in cross-validation, and the dearest part of inference.
The weights (judges/data/open_style_model.npz) are written by benchmarks/train_style_classifier.py,
which also reports the leave-one-set-out cross-validation that chose the model and the way the judge
combines it with the markers (judges/open_world/judge.py). Inference is a dictionary look-up per feature
and one small matrix sum: a few tens of microseconds.
"""

from __future__ import annotations

import functools
import io
import math
import zipfile
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np

MODEL_PATH = Path(__file__).resolve().parents[1] / "data" / "open_style_model.npz"  # judges/data/
CLASSES: tuple[str, ...] = ("academic", "cute", "chuunibyou", "classical", "plain")
_FIRST_PERSON = frozenset("i me my mine myself we us our ours".split())
_SECOND_PERSON = frozenset("you your yours yourself yourselves".split())
# formal and archaic function words: register in the grammar, not in any topic's words
_FORMAL = frozenset("thus hence whom whose upon whilst wherein whereby therefore however moreover shall nor".split())
_LATINATE = ("tion", "sion", "ment", "ity", "ence", "ance", "ous", "ive", "ical", "ism", "ist")  # words of 6+ letters
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyz'")
DENSE: tuple[str, ...] = (
    *("share_aca", "share_cute", "share_chuu", "share_cla", "mass", "bang", "first", "wordlen"),
    *("longword", "latinate", "sentence", "contraction", "comma", "second", "formal", "types", "semicolon"),
)


def _word_features(w: str) -> tuple[str, ...]:
    if len(w) >= 5:
        return ("w:" + w, "s:" + w[-3:], "s:" + w[-4:], "p:" + w[:3])
    return ("w:" + w,)


def _letters(words: Sequence[str]) -> list[str]:
    start = _WORD_START
    return [w for w in words if w[0] in start]  # numbers out


def sparse_features(toks: Sequence[str], words: Sequence[str]) -> set[str]:
    """The names of a piece's sparse features (see module doc): `toks` its tokens, `words` its
    words in order. Training reads these; the judge reads StyleModel.rows, the same set as rows."""
    ws = _letters(words)
    out = {f for w in set(ws) for f in _word_features(w)}
    out.update("t:" + t for t in toks if t[0] not in _WORD_START and not t[0].isdigit())
    return out


def _token_counts(t: str) -> tuple[int, ...]:
    """What a token adds to the dense features' counts (_COUNTS order)."""
    if t[0] in _WORD_START:  # a word (numbers are not)
        return (
            *(1, len(t), t in _FIRST_PERSON, t in _SECOND_PERSON, t in _FORMAL, len(t) >= 8),
            *(len(t) >= 6 and t.endswith(_LATINATE), "'" in t[1:] and not t.endswith("'s"), 0, 0, 0, 0),
        )
    return (0, 0, 0, 0, 0, 0, 0, 0, len(t) if t[0] == "!" else 0, t[0] in ".!?", t == ",", t in (";", ":"))


# the counts per piece that the dense features are made of, summed over its tokens through a memo
_COUNTS: tuple[str, ...] = (
    *("words", "letters", "first", "second", "formal", "long", "latinate", "contraction", "bang", "stops"),
    *("commas", "semicolons"),
)
_TOKEN_COUNTS: dict[str, tuple[int, ...]] = {}


def _counts(toks: Sequence[str]) -> list[int]:
    memo = _TOKEN_COUNTS
    try:
        rows = list(map(memo.__getitem__, toks))
    except KeyError:
        if len(memo) > 200_000:  # a bound on the memo in a long run
            memo.clear()
        for t in toks:
            if t not in memo:
                memo[t] = _token_counts(t)
        rows = list(map(memo.__getitem__, toks))
    return list(map(sum, zip(*rows))) if rows else [0] * len(_COUNTS)


def dense_features(
    toks: Sequence[str], words: Sequence[str], scores: Sequence[float], plain_mass: float
) -> list[float]:
    """The dense features in DENSE order: `scores` the marker mass per marked style
    (open_styles.MARKED order), `plain_mass` the mass below which the markers read the piece plain.
    Then register without marker words (DENSE's second line), over the words without numbers: the
    share of long words (8+ letters) and of Latinate endings, words per sentence, contractions (not
    the possessive 's), commas, second-person words, formal and archaic function words ("thus",
    "whom", "upon"), distinct words over words, semicolons and colons; each scaled to ~0-1. Every
    count is an integer summed over the tokens (`_counts`, a memo per token)."""
    words_n, letters, first, second, formal, long, latinate, contraction, bang, stops, commas, semi = _counts(toks)
    total = sum(scores)
    n = max(words_n, 1)
    dense = [s / (total + 1.0) for s in scores]
    dense.append(min(total / max(plain_mass, 1e-9), 3.0) / 3.0)
    dense.append(min(bang / n * 10, 1.0))
    dense.append(first / n * 5)
    dense.append(letters / n / 10)
    dense += (long / n * 3, latinate / n * 5, min(n / (stops or 1) / 30, 2.0), contraction / n * 10)
    dense += (commas / n * 5, second / n * 5, formal / n * 10, len(set(_letters(words))) / n, semi / n * 10)
    return dense


class StyleModel:
    """Weights of a multinomial logistic regression: `index` sparse feature -> row of `weights`
    ([sparse features + dense features + 1 bias, classes])."""

    def __init__(self, vocab: Sequence[str], weights: np.ndarray) -> None:
        self.index = {f: i for i, f in enumerate(vocab)}
        self.weights = np.ascontiguousarray(weights, dtype=np.float64)
        self.n_sparse = len(vocab)
        self._dense = self.weights[self.n_sparse : self.n_sparse + len(DENSE)]
        self._bias = self.weights[-1]
        self._tokens: dict[str, tuple[int, ...]] = {}  # token -> rows of its features

    def rows(self, toks: Sequence[str]) -> set[int]:
        """The rows of sparse_features(toks, words) that the model knows: a memo per distinct token
        (a word's word and affix rows, a mark's row)."""
        memo = self._tokens
        distinct = set(toks)
        try:
            out = set(chain.from_iterable(map(memo.__getitem__, distinct)))
        except KeyError:
            if len(memo) > 200_000:  # a bound on the memo in a long run
                memo.clear()
            for t in distinct - memo.keys():
                memo[t] = self._token_rows(t)
            out = set(chain.from_iterable(map(memo.__getitem__, distinct)))
        return out

    def _token_rows(self, t: str) -> tuple[int, ...]:
        if t[0] in _WORD_START:
            names: tuple[str, ...] = _word_features(t)
        elif t[0].isdigit():
            names = ()
        else:
            names = ("t:" + t,)
        return tuple(i for i in map(self.index.get, names) if i is not None)

    def logits(self, rows: set[int], dense: Sequence[float]) -> list[float]:
        z = np.dot(np.array(dense), self._dense) + self._bias
        if rows:
            z += self.weights.take(list(rows), axis=0).sum(axis=0) / math.sqrt(len(rows))
        return z.tolist()

    def probs(self, rows: set[int], dense: Sequence[float]) -> list[float]:
        z = self.logits(rows, dense)
        top = max(z)
        e = [math.exp(v - top) for v in z]
        s = sum(e)
        return [v / s for v in e]

    def save(self, path: Path) -> None:
        """Write the weights as an .npz that np.load reads, byte-identical for identical weights:
        np.savez stamps each member with the time of writing, this writes a fixed date."""
        vocab = sorted(self.index, key=self.index.__getitem__)
        arrays = {"vocab": np.array(vocab), "weights": self.weights.astype(np.float16), "classes": np.array(CLASSES)}
        with zipfile.ZipFile(path, "w") as zf:
            for name, arr in arrays.items():
                buf = io.BytesIO()
                np.lib.format.write_array(buf, arr, allow_pickle=False)
                info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, buf.getvalue())


@functools.cache
def model() -> StyleModel | None:
    """The shipped model, loaded on first use; None if the file is absent."""
    if not MODEL_PATH.exists():
        return None
    with np.load(MODEL_PATH) as z:
        if tuple(z["classes"].tolist()) != CLASSES:
            raise ValueError(f"{MODEL_PATH}: classes {z['classes'].tolist()} != {CLASSES}")
        return StyleModel(z["vocab"].tolist(), z["weights"])
