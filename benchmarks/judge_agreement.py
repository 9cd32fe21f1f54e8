"""How well the rubric judge agrees with the world that generated the text.

    python benchmarks/judge_agreement.py [--per-style 400] [--seed 0]

Prints: judged style == true style per style; quality pass rate on well-formed pieces; quality
failure rate per corruption kind; verdicts per second on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from judges.rubric import RubricJudge
from testbed.types import JudgeRequest
from testbed.world import CORRUPTIONS, STYLES, TOPICS, corrupt, generate, prompts, render_prompt


def make_corpus(per_style: int, seed: int) -> list[tuple[str, JudgeRequest]]:
    """(true style, request) pairs; prompts rendered with the piece's true topic."""
    rng = random.Random(seed)
    by_topic: dict[str, list] = {}
    for spec in prompts("train") + prompts("heldout"):
        by_topic.setdefault(spec.topic, []).append(spec)
    out = []
    for style in STYLES:
        for _ in range(per_style):
            topic = rng.choice(TOPICS)
            spec = rng.choice(by_topic[topic])
            text = generate(style, topic, rng)
            prompt = render_prompt(spec, rng.sample(STYLES, 3))
            out.append((style, JudgeRequest(prompt, text, style, tuple(STYLES), topic)))
    return out


def corrupted(corpus: list[tuple[str, JudgeRequest]], kind: str, seed: int) -> list[JudgeRequest]:
    rng = random.Random(f"{seed}-{kind}")
    return [
        JudgeRequest(r.prompt, corrupt(r.response, kind, rng, style=s, topic=r.topic), s, r.candidate_styles, r.topic)
        for s, r in corpus
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-style", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    judge = RubricJudge(seed=args.seed)
    corpus = make_corpus(args.per_style, args.seed)
    verdicts = [judge.score(r) for _, r in corpus]

    print(f"corpus: {args.per_style} pieces x {len(STYLES)} styles, seed {args.seed}")
    print("style agreement (judged == true):")
    for style in STYLES:
        vs = [v for (s, _), v in zip(corpus, verdicts) if s == style]
        confused: dict[str, int] = {}
        for v in vs:
            if v.style != style:
                confused[v.style or "None"] = confused.get(v.style or "None", 0) + 1
        print(f"  {style:<11} {sum(v.style == style for v in vs) / len(vs):7.2%}  misread as: {confused or '-'}")
    print(f"  {'overall':<11} {sum(v.style == s for (s, _), v in zip(corpus, verdicts)) / len(corpus):7.2%}")
    print(f"quality pass rate, well-formed pieces: {sum(v.quality for v in verdicts) / len(verdicts):.2%}")
    print("quality failure rate, corrupted pieces:")
    for kind in CORRUPTIONS:
        vs = [judge.score(r) for r in corrupted(corpus, kind, args.seed)]
        print(f"  {kind:<10} {sum(1 - v.quality for v in vs) / len(vs):7.2%}")

    reqs = [r for _, r in corpus]
    best = 0.0
    for _ in range(3):  # best of three: the machine is shared
        t0 = time.perf_counter()
        for r in reqs:
            judge.score(r)
        best = max(best, len(reqs) / (time.perf_counter() - t0))
    print(f"throughput: {best:,.0f} verdicts/s (one core, typical pieces)")


if __name__ == "__main__":
    main()
