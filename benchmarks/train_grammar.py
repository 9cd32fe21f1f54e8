"""Choose the open-world judge's grammar threshold (judges/open_world/judge.py: GRAMMAR_RATE, violations of
judges/open_world/grammar.py per word) by leave-one-set-out cross-validation over the eight voices sets.

    python benchmarks/train_grammar.py [--show]

Each voices set (dev, heldout, heldout2 ... heldout7) in turn is held out; on the other seven and the
original corpus the threshold with the most pieces judged right on quality (good passing, bad
failing) is chosen (ties: the median of the tied thresholds), then scored on the held-out set. The
judge's other checks, fluency's other parts included, are run as they are (FLOW_MIN, DISORDER_PMI
fixed: benchmarks/train_fluency.py), so only the grammar rule varies; like flow, it applies to pieces
with words outside the world's vocabulary only. Prints per set and pooled: good pieces passing, bad
pieces failing per kind, against the judge without the rule; then each threshold on all sets, and
the per-piece cost of the signal. --show lists every piece with a violation.

Superseded by benchmarks/train_fluency_joint.py (GRAMMAR_RATE chosen jointly with the flow bar over
nine sets); this script scores the earlier independent rule (flow >= 0.8, one disorder pair fails).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from open_world_agreement import SPLITS, load_corpus  # noqa: E402
from train_fluency import Piece, add, fails, line, pieces  # noqa: E402

from judges.open_world.grammar import classes, violations  # noqa: E402
from judges.open_world.judge import DISORDER_PMI, GRAMMAR_RATE  # noqa: E402
from judges.open_world.text import normalise, tokens, words_of  # noqa: E402

FLOW_MIN = 0.8  # the earlier independent flow threshold this script's rule is scored beside

GRID = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, math.inf)  # violations per word


class Scored(NamedTuple):
    piece: Piece
    words: int
    found: tuple[tuple[str, str, str], ...]


def scored() -> list[Scored]:
    rows = [r for c in ("voices", "original") for r in load_corpus(c)]
    texts = {r["id"]: r["text"] for r in rows}
    assert len(texts) == len(rows), "piece ids repeat"
    out = []
    for p in pieces():
        toks = tokens(normalise(texts[p.id]))
        out.append(Scored(p, len(words_of(toks)), tuple(violations(toks))))
    return out


def grammar_fails(s: Scored, rate: float) -> bool:
    if fails(s.piece, FLOW_MIN, DISORDER_PMI):
        return True
    return not s.piece.in_world and len(s.found) >= rate * max(s.words, 1)


def right(ss: list[Scored], rate: float) -> int:
    return sum(grammar_fails(s, rate) != s.piece.good for s in ss)


def choose(ss: list[Scored]) -> float:
    scores = {t: right(ss, t) for t in GRID}
    top = max(scores.values())
    tied = [t for t in GRID if scores[t] == top]
    return tied[(len(tied) - 1) // 2]


def figures(ss: list[Scored], rate: float) -> tuple[int, int, Counter[str], Counter[str]]:
    good = [s for s in ss if s.piece.good]
    passed = sum(not grammar_fails(s, rate) for s in good)
    kinds: Counter[str] = Counter(s.piece.kind for s in ss if not s.piece.good)
    failed: Counter[str] = Counter(s.piece.kind for s in ss if not s.piece.good and grammar_fails(s, rate))
    return passed, len(good), failed, kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    ss = scored()
    if a.show:
        for s in ss:
            if s.found:
                print(f"  {s.piece.id:<24} {s.piece.kind:<16} words={s.words} {s.found}")
    empty: tuple[int, int, Counter[str], Counter[str]] = (0, 0, Counter(), Counter())
    pooled, pooled_before = empty, empty
    print("leave-one-set-out over the eight voices sets (the original corpus always trains):")
    for out in SPLITS:
        train = [s for s in ss if s.piece.split != out]
        test = [s for s in ss if s.piece.split == out]
        rate = choose(train)
        f, b = figures(test, rate), figures(test, math.inf)
        pooled, pooled_before = add(pooled, f), add(pooled_before, b)
        print(f"  {out:<9} chose GRAMMAR_RATE={rate}")
        print(f"      after  {line(f)}\n      before {line(b)}")
    print(f"  pooled after  {line(pooled)}\n  pooled before {line(pooled_before)}")
    orig = [s for s in ss if s.piece.split == "original"]
    best = choose(ss)
    print(f"the judge's GRAMMAR_RATE={GRAMMAR_RATE}: {line(figures(ss, GRAMMAR_RATE))}")
    print(f"on all sets: GRAMMAR_RATE={best}  {line(figures(ss, best))}")
    print(
        f"  original corpus: after {line(figures(orig, best))}\n                   before {line(figures(orig, math.inf))}"
    )
    for t in GRID:
        print(f"    GRAMMAR_RATE={t:<6} right {right(ss, t)}  {line(figures(ss, t))}")
    toks = [tokens(normalise(r["text"])) for c in ("voices", "original") for r in load_corpus(c)]
    classes()
    t0 = time.process_time()
    for _ in range(5):
        for t in toks:
            violations(t)
    cpu = time.process_time() - t0
    print(f"cost: {1e6 * cpu / (5 * len(toks)):.1f} CPU microseconds a piece ({len(toks)} hand-written pieces)")


if __name__ == "__main__":
    main()
