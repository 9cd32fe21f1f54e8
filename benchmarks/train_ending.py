"""Choose the open-world judge's closing-line rule (judges/open_world/text.py: SIGN_OFF_WORDS, CUT_LAST)
by leave-one-set-out cross-validation over the eight voices sets.

    python benchmarks/train_ending.py [--show]

A piece with words outside the world's vocabulary that does not end on a stop, an emoticon or a chat
interjection passes the ending check when at most SIGN_OFF_WORDS words follow its last . ! ? or
emoticon and the last token is a word outside CUT_LAST ("... wrap up warm my darlings!! Love Nana
xx"). Grid: SIGN_OFF_WORDS 0 (no closing line: the judge before) to 8, CUT_LAST none, the words a
sentence cannot end on (_BAD_LAST) or every function word. Each voices set (dev, heldout, heldout2
... heldout7) in turn is held out; on the other seven and the original corpus the setting with the
most good pieces passing the ending check and no truncated piece passing it is chosen (ties: the
fewest words, then the longest CUT_LAST: the least permissive), then the whole judge is scored on the
held-out set with it. Also printed: the share of synthetic cuts that pass the ending check (every
good piece of the voices sets cut after each of its words from the 10th to the last but one): the
price of the rule against truncations the sets do not hold; --max-cuts 0.03 adds to the criterion
that at most 3% of the training sets' synthetic cuts pass.

Finding (docs/environments.md): the rule chosen on the sets (5 words, not ending on a word of
_BAD_LAST) passes 10 more good pieces held out and every truncated piece still fails, but it passes
25% of the synthetic cuts (0.1% before): a piece cut a few words into a new sentence reads as signed
off. So the rule lives here, not in the judge.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agreement_stats import Tally, add_tallies, tally_line  # noqa: E402
from open_world_agreement import SPLITS, load_corpus, request  # noqa: E402

from judges.open_world.judge import OPEN_CHECKS, OpenWorldJudge  # noqa: E402
from judges.open_world.text import (  # noqa: E402
    _BAD_LAST,
    _WORD_START,
    FUNCTION_WORDS,
    is_emoticon,
    is_final,
    normalise,
    proper_ending,
    signs_off,
    tokens,
)
from judges.open_world.topics import WORLD_WORDS  # noqa: E402

Setting = tuple[int, str]  # (SIGN_OFF_WORDS, CUT_LAST's name)
CUTS: dict[str, frozenset[str]] = {"none": frozenset(), "bad_last": _BAD_LAST, "function": FUNCTION_WORDS}
STRICT = {"none": 0, "bad_last": 1, "function": 2}
SETTINGS: list[Setting] = [(k, c) for k in range(9) for c in CUTS]
BEFORE: Setting = (0, "none")


class Piece(NamedTuple):
    id: str
    split: str
    kind: str
    good: bool
    other_fail: bool  # a check other than the ending fails
    toks: list[str]
    in_world: bool


def pieces() -> list[Piece]:
    judge = OpenWorldJudge(checks=tuple(c for c in OPEN_CHECKS if c != "ending"))
    out = []
    for corpus in ("voices", "original"):
        for r in load_corpus(corpus):
            v = judge.score(request(r))
            toks = tokens(normalise(r["text"]))
            words = [t for t in toks if t[0].isalnum() or t[0] == "'"]
            split = r["split"] if corpus == "voices" else "original"
            out.append(Piece(r["id"], split, r["kind"], r["good"], v.quality == 0, toks, WORLD_WORDS.issuperset(words)))
    return out


def closing_line(toks: list[str], max_words: int, cut_last: frozenset[str]) -> bool:
    """At most `max_words` (>= 1) words follow the last . ! ? or emoticon, and the last token is a
    word not in `cut_last` (a closing line: "Love Nana xx"; the sets' truncated pieces run on
    longer, or stop on "the", "and"). The candidate rule; not in the judge (module doc)."""
    if max_words < 1 or not toks or toks[-1][0] not in _WORD_START or toks[-1] in cut_last:
        return False
    n = 0
    for tok in reversed(toks):
        if is_final(tok) or is_emoticon(tok):
            return True
        if tok[0] in _WORD_START:
            n += 1
            if n > max_words:
                return False
    return False


def ends(toks: list[str], in_world: bool, s: Setting) -> bool:
    """The ending check under a setting (as judges/open_world/judge.py applies it)."""
    return proper_ending(toks) or (not in_world and (signs_off(toks) or closing_line(toks, s[0], CUTS[s[1]])))


def fails(p: Piece, s: Setting) -> bool:
    return p.other_fail or not ends(p.toks, p.in_world, s)


def choose(ps: list[Piece], max_cuts: float = 1.0, cut_rates: dict | None = None) -> Setting:
    """Most good pieces passing the ending check, no truncated piece passing it (and, with
    `max_cuts` < 1, at most that share of the synthetic cuts of `ps`'s sets: `cut_rates`); ties:
    the fewest words, then the strictest CUT_LAST."""
    ok = []
    splits = {p.split for p in ps}
    for s in SETTINGS:
        if any(ends(p.toks, p.in_world, s) for p in ps if p.kind == "truncated"):
            continue
        if max_cuts < 1.0 and cut_rates is not None:
            c = sum(cut_rates[(sp, s)][0] for sp in splits if (sp, s) in cut_rates)
            n = sum(cut_rates[(sp, s)][1] for sp in splits if (sp, s) in cut_rates)
            if c > max_cuts * n:
                continue
        ok.append((sum(ends(p.toks, p.in_world, s) for p in ps if p.good), -s[0], STRICT[s[1]], s))
    return max(ok)[3]


def figures(ps: list[Piece], s: Setting) -> Tally:
    good = [p for p in ps if p.good]
    kinds: Counter[str] = Counter(p.kind for p in ps if not p.good)
    failed: Counter[str] = Counter(p.kind for p in ps if not p.good and fails(p, s))
    return sum(not fails(p, s) for p in good), len(good), failed, kinds


def cuts(ps: list[Piece], s: Setting) -> tuple[int, int]:
    """(synthetic cuts passing the ending check, cuts): each good voices piece cut after each of its
    words from the 10th to the last but one."""
    passed = n = 0
    for p in ps:
        if not p.good or p.split == "original":
            continue
        w = 0
        for j, tok in enumerate(p.toks[:-1]):
            if tok[0].isalnum() or tok[0] == "'":
                w += 1
                if w >= 10:
                    n += 1
                    passed += ends(p.toks[: j + 1], p.in_world, s)
    return passed, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--max-cuts", type=float, default=1.0, help="the most synthetic cuts a rule may pass (share)")
    a = ap.parse_args()
    ps = pieces()
    rates = None
    if a.max_cuts < 1.0:
        rates = {(sp, s): cuts([p for p in ps if p.split == sp], s) for sp in SPLITS for s in SETTINGS}
    empty: Tally = (0, 0, Counter(), Counter())
    pooled, pooled_before = empty, empty
    print("leave-one-set-out over the eight voices sets (the original corpus always trains):")
    for out in SPLITS:
        train = [p for p in ps if p.split != out]
        test = [p for p in ps if p.split == out]
        s = choose(train, a.max_cuts, rates)
        f, b = figures(test, s), figures(test, BEFORE)
        pooled, pooled_before = add_tallies(pooled, f), add_tallies(pooled_before, b)
        print(f"  {out:<9} chose SIGN_OFF_WORDS={s[0]} CUT_LAST={s[1]}")
        print(f"      after  {tally_line(f)}\n      before {tally_line(b)}")
    print(f"  pooled after  {tally_line(pooled)}\n  pooled before {tally_line(pooled_before)}")
    best = choose(ps, a.max_cuts, rates)
    print(f"on all sets: SIGN_OFF_WORDS={best[0]} CUT_LAST={best[1]}  {tally_line(figures(ps, best))}")
    for s in SETTINGS:
        c, n = cuts(ps, s)
        print(
            f"    {s[0]} {s[1]:<8} {tally_line(figures(ps, s))}  synthetic cuts passing {c}/{n} ({c / max(n, 1):.1%})"
        )
    if a.show:
        for p in ps:
            if p.good and not ends(p.toks, p.in_world, BEFORE):
                print(f"  {p.id:<24} passes with {best}: {ends(p.toks, p.in_world, best)}  ...{' '.join(p.toks[-8:])}")


if __name__ == "__main__":
    main()
