"""How well the small-LM judge (SmolLM2-135M, judges/smollm.py) agrees with the rubric judge.

    OMP_NUM_THREADS=1 python benchmarks/smollm_agreement.py [--per-style 20] [--corrupted 20] [--seed 0]

Needs the `smollm` extra (see judges/README.md). The corpus: `--per-style` well-formed pieces per
style (benchmarks/judge_agreement.py's corpus) plus `--corrupted` corrupted ones (the corruption
kinds in turn). Each request's target style is drawn at random, independent of the piece, so a
judge that echoed the target would not score. Prints agreement with the rubric on style (per true
style, and overall), on quality (overall, well-formed, corrupted), the failure (unparseable) rate,
the styles the model answered, and verdicts/s on one thread. Agreement is over judged verdicts;
failures are counted apart.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from benchmarks.judge_agreement import make_corpus
from judges.rubric import RubricJudge
from judges.smollm import SmolLMJudge
from testbed.types import JudgeRequest
from testbed.world import CORRUPTIONS, STYLES, corrupt


def labelled_corpus(per_style: int, n_corrupted: int, seed: int) -> list[tuple[str, str, JudgeRequest]]:
    """(true style, kind: "clean" or a corruption, request), targets drawn at random."""
    rng = random.Random(f"{seed}-smollm")
    out = []
    for style, req in make_corpus(per_style, seed):
        out.append(
            (
                style,
                "clean",
                JudgeRequest(req.prompt, req.response, rng.choice(STYLES), req.candidate_styles, req.topic),
            )
        )
    sources = make_corpus(max(1, -(-n_corrupted // len(STYLES))), seed + 1)
    rng.shuffle(sources)
    for i, (style, req) in enumerate(sources[:n_corrupted]):
        kind = CORRUPTIONS[i % len(CORRUPTIONS)]
        text = corrupt(req.response, kind, rng, style=style, topic=req.topic)
        out.append((style, kind, JudgeRequest(req.prompt, text, rng.choice(STYLES), req.candidate_styles, req.topic)))
    return out


def pct(num: int, den: int) -> str:
    return f"{num / den:7.2%} ({num}/{den})" if den else "     - (0/0)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-style", type=int, default=20)
    ap.add_argument("--corrupted", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=10)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    corpus = labelled_corpus(args.per_style, args.corrupted, args.seed)
    rubric = RubricJudge(seed=args.seed)
    ref = [rubric.score(r) for _, _, r in corpus]

    t0 = time.perf_counter()
    judge = SmolLMJudge(max_new_tokens=args.max_new_tokens)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = [judge.score(r) for _, _, r in corpus]
    judge_s = time.perf_counter() - t0

    rows = list(zip(corpus, ref, got))
    ok = [(c, a, b) for c, a, b in rows if b.error is None]
    print(
        f"corpus: {args.per_style} pieces x {len(STYLES)} styles + {args.corrupted} corrupted = {len(corpus)} "
        f"requests, seed {args.seed}; model {judge.gguf_path.name}, template {judge.template}, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(f"failures (unparseable or error): {pct(len(rows) - len(ok), len(rows))}")
    print("style agreement with the rubric (judged verdicts), by true style:")
    for style in STYLES:
        sub = [(a, b) for (s, _, _), a, b in ok if s == style]
        print(f"  {style:<11} {pct(sum(a.style == b.style for a, b in sub), len(sub))}")
    clean = [(a, b) for (_, k, _), a, b in ok if k == "clean"]
    print(
        f"  {'overall':<11} {pct(sum(a.style == b.style for _, a, b in ok), len(ok))}"
        f"   (well-formed only: {pct(sum(a.style == b.style for a, b in clean), len(clean)).strip()})"
    )
    print(
        f"  chance (always the commonest answer): {max(Counter(a.style for _, a, _ in ok).values(), default=0) / max(1, len(ok)):.2%}"
    )
    print("quality agreement with the rubric:")
    bad = [(a, b) for (_, k, _), a, b in ok if k != "clean"]
    print(f"  overall     {pct(sum(a.quality == b.quality for _, a, b in ok), len(ok))}")
    print(
        f"  well-formed {pct(sum(a.quality == b.quality for a, b in clean), len(clean))}"
        f"   rubric passes {sum(a.quality for a, _ in clean)}, model passes {sum(b.quality for _, b in clean)}"
    )
    print(
        f"  corrupted   {pct(sum(a.quality == b.quality for a, b in bad), len(bad))}"
        f"   rubric passes {sum(a.quality for a, _ in bad)}, model passes {sum(b.quality for _, b in bad)}"
    )
    print(f"style_match agreement: {pct(sum(a.style_match == b.style_match for _, a, b in ok), len(ok))}")
    print(f"model's style answers: {dict(Counter(b.style for _, _, b in ok).most_common())}")
    print(f"throughput: {len(rows) / judge_s:.2f} verdicts/s (one request at a time; model load {load_s:.1f} s)")


if __name__ == "__main__":
    main()
