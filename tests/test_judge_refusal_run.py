"""A refused key stops a run: the LLM judge on the local server's quota drill (HTTP 429 with
Z.ai's code 1113, judges/drills.py), in a tiny run through the real CLI. The run stops with exit 3
at the first refusal, wherever the first judge call falls: in the loop (a checkpoint is written),
or before it (the reference evaluation, SAO's warm-up: nothing trained yet)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEY_ENV = "TESTBED_TEST_QUOTA_KEY"


def test_a_1113_drill_stops_a_tiny_run_with_exit_3_within_one_judge_call(tmp_path):
    """`python -m testbed.run` on a tiny scenario, its LLM judge on the local server's quota drill:
    the first held-out evaluation (t=0) meets the 429 with code 1113; the run stops there, with
    exit 3, a checkpoint and a message naming the cause and the key's variable (never its value),
    after exactly one chat request (the server logs each request it gets)."""
    key = "sk-drill-" + secrets.token_hex(8)
    judge = {
        "type": "llm",
        "args": {
            "model": "openai/glm-4.7",
            "local_server": {"judge": "rubric", "drill": "quota", "token_env": KEY_ENV, "verbose": True},
            "concurrency": 1,
            "cache": False,
        },
    }
    args = [
        "tests/data/golden.yaml",
        "--set",
        f"policy.checkpoint={ROOT / 'tests/data/golden/policy'}",
        "--set",
        "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}]",
        "--set",
        "eval.reference_samples=0",  # the first judge call is then the held-out evaluation at t=0
        "--set",
        f"judge={json.dumps(judge)}",
        *("--out", str(tmp_path), "--run-name", "quota", "--no-report"),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "TESTBED_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        KEY_ENV: key,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]
    assert out.count('"POST /v1/chat/completions HTTP/1.1" 429') == 1 and out.count("POST /v1/chat") == 1
    stop = next(line for line in out.splitlines() if line.startswith("stopped: "))
    assert "judge refused: quota exhausted" in stop and "code 1113" in stop and KEY_ENV in stop
    assert "A checkpoint was written" in stop and "at t=0" in stop
    run_dir = tmp_path / "quota"
    assert list((run_dir / "checkpoints").glob("rm-seed0/*.pt"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and "code 1113" in manifest["stop_reason"]
    assert key not in out and not any(key.encode() in p.read_bytes() for p in run_dir.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "arm, stage",
    [
        ("{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}", "reference"),
        ("{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 32}}", "warm-up"),
    ],
    ids=["reference-evaluation", "sao-warm-up"],
)
def test_a_refusal_before_training_stops_the_run_too(arm, stage, tmp_path, monkeypatch, capsys):
    """Before the loop (the reference evaluation, SAO's warm-up) failed verdicts are dropped, not
    counted: a refusal there must stop the run as well, not train a warm-up on nothing."""
    from testbed.cli.run_command import main

    monkeypatch.setenv(KEY_ENV, "sk-drill-" + secrets.token_hex(8))
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    judge = {
        "type": "llm",
        "args": {
            "model": "openai/glm-4.7",
            "local_server": {"judge": "rubric", "drill": "quota", "token_env": KEY_ENV},
            "concurrency": 1,
            "cache": False,
        },
    }
    code = main(
        [
            str(ROOT / "tests/data/golden.yaml"),
            *("--set", f"policy.checkpoint={ROOT / 'tests/data/golden/policy'}"),
            *("--set", f"arms=[{arm}]", "--set", f"judge={json.dumps(judge)}"),
            *("--out", str(tmp_path), "--run-name", "early", "--no-report"),
        ]
    )
    err = capsys.readouterr()
    assert code == 3
    assert "judge refused: quota exhausted" in err.err + err.out and "(before training)" in err.err + err.out
    assert not list((tmp_path / "cache").rglob("critic-*.pt"))  # no warm-up trained on no samples, none cached
