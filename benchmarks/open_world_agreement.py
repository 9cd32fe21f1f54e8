"""How well the open-world judge reads natural English: two hand-written corpora (each a dev half
and a held-out half), the generator's corpus, and verdicts per second on one core.

    python benchmarks/open_world_agreement.py [--corpus voices|original|all]
        [--split dev|heldout|heldout2|...|heldout10|all] [--modes open,world] [--per-style 400] [--seed 0] [--misses]

The corpora (judges/data/): `original` (open_world_corpus.jsonl, 100 pieces, written beside the
judge) and `voices` (open_world_voices_{dev,heldout}.jsonl, 258 pieces in many writers' voices,
issue 29: its held-out half was committed before the judge change it tests; scored, it became
development data; and open_world_voices_heldout2.jsonl, split `heldout2`, 135 pieces written later
in two personas per style, committed before the topicality change it tests, scored once after it;
and open_world_voices_heldout3.jsonl, split `heldout3`, 145 pieces in three further personas per
style, committed before the register and nearness changes it tests, scored once after them; and
open_world_voices_heldout4.jsonl, split `heldout4`, 139 pieces in three more personas per style,
committed before the changes it tests, scored once after them; and
open_world_voices_heldout5.jsonl, split `heldout5`, 126 pieces in three more personas per style,
committed before the style-classifier change it tests, scored once after it; and
open_world_voices_heldout6.jsonl, split `heldout6`, 132 pieces in three more personas per style,
written by another author, committed before the topic-model change it tests, scored once after it; and
open_world_voices_heldout7.jsonl, split `heldout7`, 144 pieces in three more personas per style,
written by another author and committed before the judge change it tests, scored once after it; and
open_world_voices_heldout8.jsonl, split `heldout8`, 148 pieces in three more personas per style,
written by a fourth author, committed before the grammar change it tests, scored once after it; and
open_world_voices_heldout9.jsonl, split `heldout9`, 148 pieces in three more personas per style,
written by a fifth author, committed before the joint fluency rule and the style change it tests,
scored once after them; and open_world_voices_heldout10.jsonl, split `heldout10`, 150 pieces in three
more personas per style, written by a sixth author, committed before it was scored, and scored once
against the judge unchanged since set 9).
The original corpus has no `heldout2` ... `heldout10` split.
Prints, per corpus, split and mode: style agreement on good pieces per true style and overall, each with Cohen's kappa;
the share of good pieces that pass quality; the share of bad pieces that fail it, per bad kind;
quality's agreement and kappa over all pieces. Then the open and world modes on the generator
corpus of benchmarks/judge_agreement.py, then verdicts/s of the open mode on the hand-written
pieces of the chosen corpora (both halves: timing reads no verdict) and on generated ones, per wall
second and per CPU second (best of five).
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

from agreement_stats import figures, print_figures  # noqa: E402  (benchmarks/agreement_stats.py)
from judge_agreement import corrupted, make_corpus  # noqa: E402  (benchmarks/judge_agreement.py)

from judges.open_world.judge import OpenWorldJudge  # noqa: E402
from judges.rubric import RubricJudge  # noqa: E402
from testbed.types import JudgeRequest, Verdict  # noqa: E402
from testbed.world import CORRUPTIONS, STYLES  # noqa: E402

DATA = ROOT / "judges" / "data"
SPLITS = ("dev", "heldout", *(f"heldout{i}" for i in range(2, 11)))
CORPORA: dict[str, tuple[Path, ...]] = {
    "original": (DATA / "open_world_corpus.jsonl",),
    "voices": tuple(DATA / f"open_world_voices_{split}.jsonl" for split in SPLITS),
}


def load_corpus(name: str = "voices") -> list[dict]:
    return [json.loads(line) for path in CORPORA[name] for line in path.read_text().splitlines() if line.strip()]


def request(row: dict) -> JudgeRequest:
    return JudgeRequest(row["prompt"], row["text"], row["style"], tuple(row["candidates"]), row["topic"])


def misses(rows: list[dict], verdicts: list[Verdict]) -> None:
    for r, v in zip(rows, verdicts):
        wrong_q = v.quality != int(r["good"])
        if wrong_q or (r["good"] and v.style != r["style"]):
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
    ap.add_argument("--corpus", choices=(*CORPORA, "all"), default="all")
    ap.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    ap.add_argument("--modes", default="open,world", help="judge modes on the hand-written corpora")
    ap.add_argument("--per-style", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--misses", action="store_true", help="print each piece the open mode got wrong")
    a = ap.parse_args()
    judge = OpenWorldJudge()
    modes = {"open": judge, "world": RubricJudge(seed=a.seed)}
    hand: list[JudgeRequest] = []
    for corpus in CORPORA if a.corpus == "all" else (a.corpus,):
        rows = load_corpus(corpus)
        hand += [request(r) for r in rows]
        for split in SPLITS if a.split == "all" else (a.split,):
            part = [r for r in rows if r["split"] == split]
            if not part:  # the original corpus has two halves only
                continue
            for mode in a.modes.split(","):
                vs = [modes[mode].score(request(r)) for r in part]
                print_figures(f"{corpus}, {split}, {mode} mode", figures(part, vs))
                if a.misses and mode == "open":
                    misses(part, vs)
    generator_figures(a.per_style, a.seed)
    gen = [r for _, r in make_corpus(100, a.seed + 1)]
    for name, reqs in (("hand-written pieces", hand), ("generated pieces", gen)):
        wall, cpu = throughput(judge, reqs)
        print(f"throughput (open mode, one core), {name}: {wall:,.0f} verdicts/s wall, {cpu:,.0f} per CPU second")


if __name__ == "__main__":
    main()
