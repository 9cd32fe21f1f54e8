"""Word flow for the open-world judge's fluency check: how much a piece's adjacent words belong
together, measured on English word-pair counts.

The counts ship in the `symspellpy` wheel (MIT licence; nothing is downloaded at run time): an
English unigram list (82,765 words with corpus counts) and a bigram list (243,342 word pairs, every
pair counted at least BIGRAM_FLOOR times in the same corpus). Only the two text files are read; the
package itself is never imported.

flow is the mean, over adjacent word pairs (a, b) whose words are both in the unigram list (a mark,
an emoji, a number or a rare word between them breaks the chain), of the pair's pointwise mutual
information in nats:
  a listed pair    log(count(a b) x N / (count(a) x count(b)))
  an unlisted one  min(0, log(BIGRAM_FLOOR x N / (count(a) x count(b)))): at most its count's
                   bound allows, and never credit (a pair of rare words says nothing)
N is the unigram list's total count. English prose binds its words ("of the", "went to", "a cup"):
of the 777 good pieces of the hand-written sets (every register: old spelling, chat, academic,
chuunibyou) all but two score 1.3-5.4 nats, nine in ten above 2.2. Word salad puts words side by
side that rarely meet, and its pairs, mostly unlisted, score ~0: 21 of the 30 salad pieces score
below 0.8 nats, the longer ones up to 2 (those still have too few function words). A piece with
fewer than FLOW_PAIRS scorable pairs gets no flow (None): too little evidence either way. The
bigram list's floor is high (a pair counted under 6.4 million times is absent), so flow sees which
words belong together, not grammar: "vendors was" and "is been" are unlisted, but so are many
fluent pairs.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from judges.wheel_data import package_dir

UNIGRAMS = "frequency_dictionary_en_82_765.txt"
BIGRAMS = "frequency_bigramdictionary_en_243_342.txt"
BIGRAM_FLOOR = 6_400_000  # the smallest count in the bigram list: an unlisted pair was counted less
FLOW_PAIRS = 4  # fewer scorable pairs than this: no flow


class Flow:
    """The two count lists, as the log-counts flow needs."""

    def __init__(self, root: Path) -> None:
        logc: dict[str, float] = {}
        total = 0
        with open(root / UNIGRAMS, encoding="utf-8") as f:
            for line in f:
                w, c = line.split()
                logc[w] = math.log(int(c))
                total += int(c)
        log_n = math.log(total)
        pmi: dict[tuple[str, str], float] = {}
        with open(root / BIGRAMS, encoding="utf-8") as f:
            for line in f:
                a, b, c = line.split()
                la, lb = logc.get(a), logc.get(b)
                if la is not None and lb is not None:
                    pmi[(a, b)] = math.log(int(c)) + log_n - la - lb
        self.logc = logc
        self.pmi = pmi
        self.floor = math.log(BIGRAM_FLOOR) + log_n  # an unlisted pair's bound, before its words' counts

    def flow(self, toks: list[str]) -> float | None:
        """Mean pair PMI of the tokens (module doc), None below FLOW_PAIRS scorable pairs."""
        # map() over the tokens and their pairs runs the lookups in C; a listed pair's words are
        # always in the unigram list, so only unlisted pairs need their words' counts
        lc = list(map(self.logc.get, toks))
        floor = self.floor
        total, n = 0.0, 0
        for s, la, lb in zip(map(self.pmi.get, zip(toks, toks[1:])), lc, lc[1:]):
            if s is not None:
                total += s
                n += 1
            elif la is not None and lb is not None:
                d = floor - la - lb
                if d < 0.0:
                    total += d
                n += 1
        return total / n if n >= FLOW_PAIRS else None


def data_root() -> Path:
    """symspellpy's package folder, found without importing the package."""
    return package_dir("symspellpy", "the fluency check needs its counts")


@functools.cache
def counts() -> Flow:
    """The count lists, read once (~1 s)."""
    return Flow(data_root())


def flow(toks: list[str]) -> float | None:
    return counts().flow(toks)
