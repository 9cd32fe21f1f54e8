"""The LLM judge through each GLM-4.7 drill of the local judge server: what each costs, measured.

    python -m judges.drill_table [--requests 8]

Starts one `python -m judges.server --drill MODE` per drill (judges/drills.py), judges the same
requests through a fresh LLM judge (LiteLLM's openai/ route, no cache) in each setting below, and
prints one markdown row per case: verdicts equal to the wrapped rubric's, failures, and the
judge's counters (judges/accounting.py). The table in judges/README.md was written by it;
tests/test_judge_drills.py asserts these counts per request (the slow timeout case on 2 requests).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from judges.llm import LLMJudge
from judges.local_server import LocalJudgeServer
from judges.rubric import RubricJudge
from testbed.types import JudgeRequest
from testbed.world import STYLES, generate, prompts, render_prompt

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("reasoning_content", "thinking default (on)", {}),
    ("think_tags", "thinking default (on)", {}),
    ("lone_close", "thinking default (on)", {}),
    ("draft", "thinking default (on)", {}),
    ("truncate", "on_truncation: more_tokens", {}),
    ("truncate", "on_truncation: thinking_off", {"on_truncation": "thinking_off"}),
    ("truncate", "max_tokens 256, retry 512", {"max_tokens": 256, "truncation_max_tokens": 512}),
    ("truncate", "thinking: off", {"thinking": "off"}),
    ("quota", "concurrency 1", {"concurrency": 1}),
    ("slow_reasoning", "timeout_s 60", {}),
    ("slow_reasoning", "timeout_s 0.5, max_retries 1", {"timeout_s": 0.5, "max_retries": 1}),
    ("slow_reasoning", "thinking: off", {"thinking": "off"}),
]
COLUMNS = ("calls", "truncated", "truncation_retries", "repairs", "timeouts", "refused", "not_sent", "reasoning_tokens")


def requests(n: int, seed: int = 0) -> list[JudgeRequest]:
    rng = random.Random(seed)
    cands = ("academic", "cute", "chuunibyou")
    out = []
    for i in range(n):
        spec = rng.choice(prompts("train"))
        text = generate(STYLES[i % len(STYLES)], spec.topic, rng)
        out.append(JudgeRequest(render_prompt(spec, list(cands)), text, rng.choice(cands), cands, spec.topic))
    return out


def row(server: LocalJudgeServer, reqs: list[JudgeRequest], args: dict[str, Any]) -> dict[str, float]:
    judge = LLMJudge(model="openai/glm-4.7", api_base=server.wait_ready(), cache=False, backoff_base_s=0.01, **args)
    try:
        verdicts = judge.judge_sync(reqs)
    finally:
        judge.close()
    rubric = [RubricJudge().score(r) for r in reqs]
    same = sum(v.error is None and (v.quality, v.style) == (e.quality, e.style) for v, e in zip(verdicts, rubric))
    return {"same": same, **judge.stats()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m judges.drill_table", description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8, help="requests judged per case (default 8)")
    a = ap.parse_args(argv)
    reqs = requests(a.requests)
    servers = {mode: LocalJudgeServer({"judge": "rubric", "drill": mode}, wait=False) for mode, _, _ in CASES}
    try:
        print(f"| drill | setting | verdicts = rubric | failures | {' | '.join(COLUMNS)} | latency p50 s |")
        print("|---" * (len(COLUMNS) + 5) + "|")
        for mode, setting, args in CASES:
            s = row(servers[mode], reqs, args)
            counts = " | ".join(f"{s[c]:.0f}" for c in COLUMNS)
            print(
                f"| {mode} | {setting} | {s['same']}/{len(reqs)} | {s['failures']:.0f} | {counts} | "
                f"{s['latency_p50_s']:.2f} |"
            )
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
