"""Choose the open-world judge's fluency constants (judges/open_world/judge.py: FLOW_MIN, and whether a
closed-class disorder pair the bigram list attests still counts: DISORDER_PMI) by leave-one-set-out
cross-validation over the seven voices sets.

    python benchmarks/train_fluency.py [--show]

Each voices set (dev, heldout, heldout2 ... heldout6) in turn is held out; on the other six and the
original corpus the setting with the most pieces judged right on quality (good passing, bad failing)
is chosen (ties: the higher DISORDER_PMI, fewer pairs excused, then the median of the tied FLOW_MIN values), then scored on the held-out set.
The judge's other checks are run as they are (fluency off), so only the fluency rule varies.
Prints per set and pooled: good pieces passing, bad pieces failing per kind, against the judge
before (KNOWN_MIN, FUNCTION_MIN, DISORDER_MAX alone). --show lists each piece's flow.

Superseded for FLOW_MIN by benchmarks/train_fluency_joint.py (the joint rule over flow, disorder
pairs and grammar, nine sets); this script scores the earlier independent thresholds and still
chooses DISORDER_PMI.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from open_world_agreement import SPLITS, load_corpus, request  # noqa: E402

from judges.open_world.flow import counts  # noqa: E402
from judges.open_world.judge import FUNCTION_MIN, KNOWN_MIN, OPEN_CHECKS, OpenWorldJudge  # noqa: E402
from judges.open_world.styles import LEXICON_WORDS  # noqa: E402
from judges.open_world.text import disorder_pairs, normalise, shape, tokens, words_of  # noqa: E402
from judges.open_world.topics import WORLD_WORDS  # noqa: E402

GRID = tuple(round(0.1 * i, 1) for i in range(21))  # FLOW_MIN candidates, nats (0: flow unused)


class Piece(NamedTuple):
    id: str
    split: str
    kind: str
    good: bool
    other_fail: bool  # a check other than fluency fails
    base_fail: bool  # the known/function part of fluency fails
    disorder: tuple[float, ...]  # the hand list's pairs, each its PMI (-inf: not in the bigram list)
    flow: float | None
    in_world: bool


def pieces() -> list[Piece]:
    judge = OpenWorldJudge(checks=tuple(c for c in OPEN_CHECKS if c != "fluency"))
    fl = counts()
    out = []
    for corpus in ("voices", "original"):
        for r in load_corpus(corpus):
            v = judge.score(request(r))
            toks = tokens(normalise(r["text"]))
            words = words_of(toks)
            sh = shape(toks, Counter(words), LEXICON_WORDS)
            bad = disorder_pairs(toks)
            split = r["split"] if corpus == "voices" else "original"
            out.append(
                Piece(
                    r["id"],
                    split,
                    r["kind"],
                    bool(r["good"]),
                    not v.quality,
                    sh.known < KNOWN_MIN or sh.function < FUNCTION_MIN,
                    tuple(fl.pmi.get(p, -math.inf) for p in bad),
                    fl.flow(toks),
                    WORLD_WORDS.issuperset(words),
                )
            )
    return out


def fails(p: Piece, flow_min: float, attested: float) -> bool:
    if p.other_fail or p.base_fail:
        return True
    if p.in_world:  # the world's own vocabulary: judged as before
        return len(p.disorder) >= 1
    if any(pmi < attested for pmi in p.disorder):
        return True
    return p.flow is not None and p.flow < flow_min


def right(ps: list[Piece], setting: tuple[float, bool]) -> int:
    return sum(fails(p, *setting) != p.good for p in ps)


ATTESTED = (math.inf, 2.0, 1.5, 1.0, 0.5, 0.0)  # a disorder pair with PMI >= this is English (inf: none is)
SETTINGS = [(t, f) for f in ATTESTED for t in GRID]


def choose(ps: list[Piece]) -> tuple[float, float]:
    """The setting with the most pieces right; ties: the highest DISORDER_PMI (fewest pairs
    excused), then the median of the tied FLOW_MIN values (the middle of the plateau)."""
    scores = {s: right(ps, s) for s in SETTINGS}
    top = max(scores.values())
    attested = max(a for (t, a), v in scores.items() if v == top)
    tied = sorted(t for (t, a), v in scores.items() if v == top and a == attested)
    return tied[(len(tied) - 1) // 2], attested


def figures(ps: list[Piece], setting: tuple[float, bool]) -> tuple[int, int, Counter[str], Counter[str]]:
    good = [p for p in ps if p.good]
    passed = sum(not fails(p, *setting) for p in good)
    kinds: Counter[str] = Counter(p.kind for p in ps if not p.good)
    failed: Counter[str] = Counter(p.kind for p in ps if not p.good and fails(p, *setting))
    return passed, len(good), failed, kinds


def line(f: tuple[int, int, Counter[str], Counter[str]]) -> str:
    passed, n_good, failed, kinds = f
    nb = sum(kinds.values())
    nf = sum(failed.values())
    per = " ".join(f"{k} {failed[k]}/{kinds[k]}" for k in sorted(kinds))
    return f"good pass {passed}/{n_good} ({passed / max(n_good, 1):.1%})  bad fail {nf}/{nb} ({nf / max(nb, 1):.1%})  [{per}]"


def add(a: tuple[int, int, Counter[str], Counter[str]], b: tuple[int, int, Counter[str], Counter[str]]):  # type: ignore[no-untyped-def]
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    ps = pieces()
    if a.show:
        for p in ps:
            fl = "none" if p.flow is None else f"{p.flow:.2f}"
            print(f"  {p.id:<24} {p.kind:<16} flow={fl} disorder={p.disorder}")
    before = (0.0, math.inf)
    empty: tuple[int, int, Counter[str], Counter[str]] = (0, 0, Counter(), Counter())
    pooled, pooled_before = empty, empty
    print("leave-one-set-out over the seven voices sets (the original corpus always trains):")
    for out in SPLITS:
        train = [p for p in ps if p.split != out]
        test = [p for p in ps if p.split == out]
        setting = choose(train)
        f, b = figures(test, setting), figures(test, before)
        pooled, pooled_before = add(pooled, f), add(pooled_before, b)
        print(f"  {out:<9} chose FLOW_MIN={setting[0]:.1f} DISORDER_PMI={setting[1]}")
        print(f"      after  {line(f)}\n      before {line(b)}")
    print(f"  pooled after  {line(pooled)}\n  pooled before {line(pooled_before)}")
    best = choose(ps)
    print(f"on all sets: FLOW_MIN={best[0]:.1f} DISORDER_PMI={best[1]}  {line(figures(ps, best))}")
    for s in SETTINGS:
        print(f"    FLOW_MIN={s[0]:.1f} DISORDER_PMI={s[1]!s:<5} right {right(ps, s)}  {line(figures(ps, s))}")


if __name__ == "__main__":
    main()
