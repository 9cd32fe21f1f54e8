"""Choose the open-world judge's fluency decision for pieces with words outside the world's
vocabulary (judges/open_world/judge.py: FLOW_MIN, DISORDER_COST, GRAMMAR_COST, GRAMMAR_RATE) jointly, by
leave-one-set-out cross-validation over the nine voices sets.

    python benchmarks/train_fluency_joint.py [--tried] [--show]

The decision (judges/open_world/judge.py `fluent`): a piece fails when its word flow is below
FLOW_MIN + DISORDER_COST x its disorder pairs + GRAMMAR_COST x its grammar violations, or when its
violations reach GRAMMAR_RATE per word, or, with no flow (too few pairs), on any disorder pair.
Disorder pairs are the hand list's closed-class pairs the bigram counts do not attest (PMI <
DISORDER_PMI, kept from benchmarks/train_fluency.py); violations are judges/open_world/grammar.py's.

Each voices set (dev, heldout, heldout2 ... heldout8) in turn is held out; on the other eight and the
original corpus the setting with the most pieces judged right on quality (good passing, bad failing)
is chosen (ties: the middle one in grid order), then scored on the held-out set. The judge's other
checks are run as they are (fluency off), the known/function part of fluency as it is, so only this
decision varies. Prints per set and pooled: good pieces passing, bad pieces failing per kind, after
and before (the judge's earlier independent thresholds: one disorder pair fails, flow >= 0.8,
violations < 0.025 per word). --tried also scores, the same way, the alternatives measured and not
kept (the independent thresholds re-chosen on nine sets, the disorder rule as a count, the worst
local window of flow); --show lists each undecided piece's signals.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agreement_stats import Tally, add_tallies, tally_line  # noqa: E402
from open_world_agreement import SPLITS, load_corpus  # noqa: E402
from train_fluency import Piece, pieces  # noqa: E402

from judges.open_world.flow import counts  # noqa: E402
from judges.open_world.grammar import violations  # noqa: E402
from judges.open_world.judge import DISORDER_PMI  # noqa: E402
from judges.open_world.text import normalise, tokens, words_of  # noqa: E402

Setting = tuple[float, ...]

FLOW_GRID = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5)  # FLOW_MIN, nats
DISORDER_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, math.inf)  # DISORDER_COST, nats a pair (inf: one fails)
GRAMMAR_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, math.inf)  # GRAMMAR_COST, nats a violation
RATE_GRID = (0.02, 0.025, 0.03, 0.04, 0.05, math.inf)  # GRAMMAR_RATE, violations a word
JOINT = [(t, d, g, r) for t in FLOW_GRID for d in DISORDER_GRID for g in GRAMMAR_GRID for r in RATE_GRID]
BEFORE: Setting = (0.8, math.inf, 0.0, 0.025)  # the judge before: independent thresholds


class Signals(NamedTuple):
    piece: Piece
    decided: bool | None  # fails (True) or passes (False) whatever this rule says; None: the rule decides
    words: int
    disorder: int  # disorder pairs the bigram counts do not attest
    grammar: int  # violations
    pairs: tuple[float, ...]  # each scorable adjacent pair's flow score, in order (judges/open_world/flow.py)


def signals() -> list[Signals]:
    rows = {r["id"]: r["text"] for c in ("voices", "original") for r in load_corpus(c)}
    fl = counts()
    out = []
    for p in pieces():
        toks = tokens(normalise(rows[p.id]))
        lc = [fl.logc.get(t) for t in toks]
        pairs = []
        for ab, la, lb in zip(zip(toks, toks[1:]), lc, lc[1:]):
            s = fl.pmi.get(ab)
            if s is not None:
                pairs.append(s)
            elif la is not None and lb is not None:
                pairs.append(min(0.0, fl.floor - la - lb))
        decided = True if p.other_fail or p.base_fail else (len(p.disorder) >= 1 if p.in_world else None)
        nd = sum(x < DISORDER_PMI for x in p.disorder)
        out.append(Signals(p, decided, len(words_of(toks)), nd, len(violations(toks)), tuple(pairs)))
    return out


def joint(s: Signals, setting: Setting) -> bool:
    """Fails, as judges/open_world/judge.py `fluent` decides (with the judge's other checks)."""
    if s.decided is not None:
        return s.decided
    flow_min, d_cost, g_cost, rate = setting
    if s.grammar and s.grammar >= rate * s.words:
        return True
    if s.piece.flow is None:
        return s.disorder >= 1
    if (s.disorder and d_cost == math.inf) or (s.grammar and g_cost == math.inf):
        return True
    # as the judge computes it (inf x 0 would be nan: an infinite cost of nothing is nothing)
    return s.piece.flow < flow_min + (d_cost * s.disorder if s.disorder else 0.0) + (
        g_cost * s.grammar if s.grammar else 0.0
    )


def count_rule(s: Signals, setting: Setting) -> bool:
    """Tried: independent thresholds, the disorder rule a count (fails at `most` pairs)."""
    if s.decided is not None:
        return s.decided
    flow_min, rate, most = setting
    if s.grammar and s.grammar >= rate * s.words:
        return True
    return s.disorder >= most or (s.piece.flow is not None and s.piece.flow < flow_min)


def worst_window(pairs: Sequence[float], w: int) -> float | None:
    if len(pairs) < w:
        return None
    run = sum(pairs[:w])
    low = run
    for i in range(w, len(pairs)):
        run += pairs[i] - pairs[i - w]
        low = min(low, run)
    return low / w


def window_rule(s: Signals, setting: Setting) -> bool:
    """Tried: the independent thresholds plus the worst window of w pairs' mean flow >= least."""
    if count_rule(s, (0.8, 0.025, 1)):
        return True
    if s.decided is not None:
        return False
    w, least = setting
    low = worst_window(s.pairs, int(w))
    return low is not None and low < least


Rule = Callable[[Signals, Setting], bool]
TRIED: dict[str, tuple[Rule, list[Setting]]] = {
    "independent thresholds, re-chosen (FLOW_MIN, GRAMMAR_RATE; one pair fails)": (
        count_rule,
        [(t / 10, r, 1) for t in range(21) for r in RATE_GRID],
    ),
    "disorder as a count (FLOW_MIN, GRAMMAR_RATE, pairs that fail)": (
        count_rule,
        [(t / 10, r, m) for t in range(21) for r in RATE_GRID for m in (1, 2, 3, 99)],
    ),
    "worst local window of flow (pairs, least mean), beside the judge before": (
        window_rule,
        [(w, round(-0.5 + 0.1 * i, 1)) for w in (6, 8, 10, 12, 16) for i in range(21)],
    ),
}


def right(ss: list[Signals], rule: Rule, setting: Setting) -> int:
    return sum(rule(s, setting) != s.piece.good for s in ss)


def choose(ss: list[Signals], rule: Rule, grid: list[Setting]) -> Setting:
    """The setting right on the most pieces; ties: the middle of the tied ones in grid order."""
    undecided = [s for s in ss if s.decided is None]  # the others are right or wrong whatever the setting
    scores = [right(undecided, rule, g) for g in grid]
    tied = [g for g, v in zip(grid, scores) if v == max(scores)]
    return tied[(len(tied) - 1) // 2]


def figures(ss: list[Signals], rule: Rule, setting: Setting) -> Tally:
    passed = sum(not rule(s, setting) for s in ss if s.piece.good)
    kinds: Counter[str] = Counter(s.piece.kind for s in ss if not s.piece.good)
    failed: Counter[str] = Counter(s.piece.kind for s in ss if not s.piece.good and rule(s, setting))
    return passed, sum(s.piece.good for s in ss), failed, kinds


def loso(ss: list[Signals], rule: Rule, grid: list[Setting], verbose: bool) -> Tally:
    pooled: Tally = (0, 0, Counter(), Counter())
    for out in SPLITS:
        setting = choose([s for s in ss if s.piece.split != out], rule, grid)
        f = figures([s for s in ss if s.piece.split == out], rule, setting)
        pooled = add_tallies(pooled, f)
        if verbose:
            print(f"  {out:<9} chose {setting}\n      after  {tally_line(f)}")
    return pooled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tried", action="store_true")
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    ss = signals()
    if a.show:
        for s in ss:
            if s.decided is None:
                fl = "none" if s.piece.flow is None else f"{s.piece.flow:.2f}"
                print(f"  {s.piece.id:<24} {s.piece.kind:<16} flow={fl} disorder={s.disorder} grammar={s.grammar}")
    print("leave-one-set-out over the nine voices sets (the original corpus always trains),")
    print("FLOW_MIN, DISORDER_COST, GRAMMAR_COST, GRAMMAR_RATE chosen together:")
    pooled_before: Tally = (0, 0, Counter(), Counter())
    for out in SPLITS:
        b = figures([s for s in ss if s.piece.split == out], joint, BEFORE)
        pooled_before = add_tallies(pooled_before, b)
    pooled = loso(ss, joint, JOINT, True)
    print(f"  pooled after  {tally_line(pooled)}\n  pooled before {tally_line(pooled_before)}")
    for out in SPLITS:
        print(f"  {out:<9} before {tally_line(figures([s for s in ss if s.piece.split == out], joint, BEFORE))}")
    best = choose(ss, joint, JOINT)
    print(f"on all sets: {best}  {tally_line(figures(ss, joint, best))}")
    orig = [s for s in ss if s.piece.split == "original"]
    print(f"  original corpus: after {tally_line(figures(orig, joint, best))}")
    print(f"                   before {tally_line(figures(orig, joint, BEFORE))}")
    if a.tried:
        for name, (rule, grid) in TRIED.items():
            print(f"tried: {name}\n  pooled {tally_line(loso(ss, rule, grid, False))}")


if __name__ == "__main__":
    main()
