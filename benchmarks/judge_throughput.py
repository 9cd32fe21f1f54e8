"""Judged episodes per second through the LLM judge path (LiteLLM -> local judge server ->
rubric), at several concurrency levels, and from the SQLite cache.

    python benchmarks/judge_throughput.py [--n 600] [--concurrency 1 8 32] [--latency-ms 0]

Starts `python -m judges.server --judge rubric --port 0` (via LLMJudge's `local_server`), judges
`--n` distinct generated pieces with the cache off at each concurrency (concurrency 1 gets n/4),
then fills a fresh cache and judges the same pieces again with the server untouched. Prints the
embedded rubric's own rate for reference. Every CPU the server and client need is on this machine,
so the numbers depend on what else runs here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks_corpus import make_requests

from judges.llm import LLMJudge
from judges.rubric import RubricJudge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--latency-ms", type=float, default=0.0, help="added server latency (a slower 'model')")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    reqs = make_requests(a.n, a.seed)
    warm = make_requests(64, a.seed + 1000)

    t0 = time.perf_counter()
    rubric = RubricJudge()
    for r in reqs:
        rubric.score(r)
    print(f"rubric in process:        {len(reqs) / (time.perf_counter() - t0):9.0f} episodes/s")

    spec = {"judge": "rubric", "latency_ms": a.latency_ms}
    with (
        tempfile.TemporaryDirectory() as tmp,
        LLMJudge(model="openai/testbed-rubric", local_server=spec, cache=False) as judge,
    ):
        judge.judge_sync(warm)  # the server's imports
        rows = []
        for c in a.concurrency:  # one client per concurrency, on the server the first one started
            client = LLMJudge(model="openai/testbed-rubric", api_base=judge.api_base, concurrency=c, cache=False)
            try:
                client.judge_sync(warm[:16])  # connections, imports
                batch = reqs[: max(50, a.n // 4)] if c == 1 else reqs
                t0 = time.perf_counter()
                verdicts = client.judge_sync(batch)
                dt = time.perf_counter() - t0
                rows.append(client.stats())
            finally:
                client.close()
            errors = sum(v.error is not None for v in verdicts)
            print(
                f"LiteLLM, concurrency {c:>3}: {len(batch) / dt:9.0f} episodes/s  ({len(batch)} in {dt:.2f} s, {errors} errors)"
            )
        s = rows[-1]
        print(
            f"  latency per verdict at concurrency {a.concurrency[-1]}: p50 {s['latency_p50_s'] * 1000:.1f} ms, "
            f"p90 {s['latency_p90_s'] * 1000:.1f} ms, p99 {s['latency_p99_s'] * 1000:.1f} ms; "
            f"tokens {s['prompt_tokens']:.0f} in / {s['completion_tokens']:.0f} out"
        )

        cached = LLMJudge(
            model="openai/testbed-rubric",
            api_base=judge.api_base,
            concurrency=32,
            cache_path=str(Path(tmp) / "bench.sqlite"),
        )
        try:
            cached.judge_sync(reqs)  # fill
            before = judge._server.stats()["chat_completions"]
            t0 = time.perf_counter()
            cached.judge_sync(reqs)
            dt = time.perf_counter() - t0
            hits = cached.stats()["cache_hits"]  # the fill had none: the pieces are distinct
            calls = judge._server.stats()["chat_completions"] - before
            print(
                f"from the cache:           {len(reqs) / dt:9.0f} episodes/s  ({hits:.0f} hits, {calls} server requests)"
            )
        finally:
            cached.close()


if __name__ == "__main__":
    main()
