"""How well the open-world judge reads natural English: the hand-written corpus
(judges/data/open_world_corpus.jsonl, a dev half and a held-out half), the generator's corpus, and
verdicts per second on one core.

    python benchmarks/open_world_agreement.py [--split dev|heldout|all] [--per-style 400] [--seed 0]

Prints, per split: style agreement per true style; the share of good pieces that pass quality;
the share of bad pieces that fail it, per bad kind; then the open mode (and, beside it, the world
mode) on the generator corpus of benchmarks/judge_agreement.py; then verdicts/s of the open mode on
the hand-written corpus and on generated pieces, per wall second and per CPU second (best of five).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere
sys.path.insert(0, str(ROOT / "benchmarks"))

from judge_agreement import corrupted, make_corpus  # noqa: E402  (benchmarks/judge_agreement.py)

from judges.open_world import OpenWorldJudge  # noqa: E402
from judges.rubric import RubricJudge  # noqa: E402
from testbed.types import JudgeRequest, Verdict  # noqa: E402
from testbed.world import CORRUPTIONS, STYLES  # noqa: E402

CORPUS = ROOT / "judges" / "data" / "open_world_corpus.jsonl"
SPLITS = ("dev", "heldout")


def load_corpus(path: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def request(row: dict) -> JudgeRequest:
    return JudgeRequest(row["prompt"], row["text"], row["style"], tuple(row["candidates"]), row["topic"])


def figures(rows: list[dict], verdicts: list[Verdict]) -> dict:
    """Style agreement (per true style and overall), good pass rate, bad fail rate per kind."""
    pairs = list(zip(rows, verdicts))
    style = {s: [v.style == r["style"] for r, v in pairs if r["style"] == s] for s in STYLES}
    kinds = sorted({r["kind"] for r in rows if not r["good"]})
    bad = {k: [v.quality == 0 for r, v in pairs if r["kind"] == k] for k in kinds}
    good = [v.quality == 1 for r, v in pairs if r["good"]]
    return {
        "n": len(rows),
        "style": {s: (sum(x), len(x)) for s, x in style.items() if x},
        "style_all": (sum(v.style == r["style"] for r, v in pairs), len(pairs)),
        "good_pass": (sum(good), len(good)),
        "bad_fail": {k: (sum(x), len(x)) for k, x in bad.items()},
        "bad_fail_all": (sum(sum(x) for x in bad.values()), sum(len(x) for x in bad.values())),
    }


def _pct(pair: tuple[int, int]) -> str:
    k, n = pair
    return f"{k / n:7.1%} ({k}/{n})" if n else "      -"


def print_figures(name: str, fig: dict) -> None:
    print(f"{name}: {fig['n']} pieces")
    print("  style agreement:  " + "  ".join(f"{s} {_pct(p).strip()}" for s, p in fig["style"].items()))
    print(f"  style, overall    {_pct(fig['style_all'])}")
    print(f"  good pass quality {_pct(fig['good_pass'])}")
    for kind, pair in fig["bad_fail"].items():
        print(f"  bad fail: {kind:<16} {_pct(pair)}")
    print(f"  bad fail, overall {_pct(fig['bad_fail_all'])}")


def misses(rows: list[dict], verdicts: list[Verdict]) -> None:
    for r, v in zip(rows, verdicts):
        wrong_q = v.quality != int(r["good"])
        if wrong_q or v.style != r["style"]:
            print(f"    {r['id']} {r['kind']:<15} true={r['style']:<10} judged={v.style:<10} q={v.quality}  {v.raw}")


def generator_figures(per_style: int, seed: int) -> None:
    corpus = make_corpus(per_style, seed)
    reqs = [r for _, r in corpus]
    print(f"generator corpus: {per_style} pieces x {len(STYLES)} styles, seed {seed}  (open | world)")
    for name, judge in (("open", OpenWorldJudge()), ("world", RubricJudge(seed=seed))):
        vs = [judge.score(r) for r in reqs]
        agree = {s: sum(v.style == s for (t, _), v in zip(corpus, vs) if t == s) / per_style for s in STYLES}
        line = "  ".join(f"{s} {a:.1%}" for s, a in agree.items())
        overall = sum(v.style == t for (t, _), v in zip(corpus, vs)) / len(vs)
        print(f"  {name:<5} style: {line}  overall {overall:.1%}")
        print(f"  {name:<5} quality pass, well-formed: {sum(v.quality for v in vs) / len(vs):.1%}")
        fails = []
        for kind in CORRUPTIONS:
            cv = [judge.score(r) for r in corrupted(corpus, kind, seed)]
            fails.append(f"{kind} {sum(1 - v.quality for v in cv) / len(cv):.1%}")
        print(f"  {name:<5} quality fail, corrupted: {'  '.join(fails)}")


def throughput(judge: OpenWorldJudge, reqs: list[JudgeRequest], n: int = 1000, rounds: int = 5) -> tuple[float, float]:
    """(verdicts per wall second, per CPU second), each the best of `rounds` batches of n: on a
    shared machine the CPU figure is what a quiet core would do (benchmarks/README.md)."""
    batch = (reqs * (n // len(reqs) + 1))[:n]
    wall = cpu = 0.0
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        for r in batch:
            judge.score(r)
        wall = max(wall, n / (time.perf_counter() - t0))
        cpu = max(cpu, n / max(time.process_time() - c0, 1e-9))
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    ap.add_argument("--per-style", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--misses", action="store_true", help="print each piece the judge got wrong")
    a = ap.parse_args()
    judge = OpenWorldJudge()
    rows = load_corpus()
    for split in SPLITS if a.split == "all" else (a.split,):
        part = [r for r in rows if r["split"] == split]
        vs = [judge.score(request(r)) for r in part]
        print_figures(f"hand-written, {split}", figures(part, vs))
        if a.misses:
            misses(part, vs)
    if a.split == "all":
        print_figures("hand-written, both halves", figures(rows, [judge.score(request(r)) for r in rows]))
    generator_figures(a.per_style, a.seed)
    hand = [request(r) for r in rows]
    gen = [r for _, r in make_corpus(100, a.seed + 1)]
    for name, reqs in (("hand-written pieces", hand), ("generated pieces", gen)):
        wall, cpu = throughput(judge, reqs)
        print(f"throughput (open mode, one core), {name}: {wall:,.0f} verdicts/s wall, {cpu:,.0f} per CPU second")


if __name__ == "__main__":
    main()
