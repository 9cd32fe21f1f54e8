"""The open judge's verdicts, `raw` text included, do not depend on the process's hash seed: string
sets iterate in an order that does, and a float sum's last bits follow the order (style marker mass
and topicality once read 34.6 in one process and 34.7 in another on the same piece)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCORE_ALL = """
import json, sys
from judges.open_world.judge import OpenWorldJudge
from testbed.types import JudgeRequest
judge = OpenWorldJudge()
for line in open("judges/data/open_world_corpus.jsonl"):
    r = json.loads(line)
    for text in (r["text"], " ".join([r["text"]] * 3)):
        v = judge.score(JudgeRequest(r["prompt"], text, r["style"], tuple(r["candidates"]), r["topic"]))
        print(v.quality, v.style, v.raw)
"""


def _verdicts(hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-c", SCORE_ALL], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_the_same_verdicts_under_two_hash_seeds():
    first, second = _verdicts("0"), _verdicts("1")
    assert len(first) == 200
    assert [a for a, b in zip(first, second) if a != b] == []
