"""A held-out evaluation with no verdict is a gap, never zeros, and its failed calls count toward
the judge-failure budget like training calls do."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from testbed.cli.run_command import main
from testbed.runtimes.collect import heldout_rows
from testbed.runtimes.learn import LoopState
from testbed.store import read_table
from testbed.types import Verdict

ROOT = Path(__file__).resolve().parent.parent


class AlwaysDown:
    """A judge whose endpoint is down: every verdict carries an error."""

    async def judge(self, requests):
        return [Verdict.failed("connection refused") for _ in requests]


def test_an_evaluation_without_verdicts_has_missing_shares():
    rows = heldout_rows([Verdict.failed("down")] * 4, t=0, target_style="cute")
    assert rows and all(r["n"] == 0 for r in rows)
    assert all(r["share"] is None and r["eval_reward"] is None and r["eval_quality"] is None for r in rows)
    good = heldout_rows([Verdict(1, 1, "cute"), Verdict(0, 0, "academic"), Verdict.failed("down")], 5, "cute")
    shares = {r["style"]: r["share"] for r in good}
    assert shares["cute"] == 0.5 and shares["academic"] == 0.5 and good[0]["n"] == 2 and good[0]["eval_reward"] == 0.5


def test_failed_evaluation_calls_count_toward_the_failure_budget():
    state = LoopState()
    state.record_eval(calls=16, failed=16)
    assert state.failed_in_a_row == 16 and state.eval_failures == 16 and state.failures == 0
    state.record_eval(calls=16, failed=3)  # the judge answered some: it is up again
    assert state.failed_in_a_row == 0


def test_a_judge_that_is_down_stops_the_run_counting_evaluation_calls(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code = main(
        [
            str(ROOT / "tests/data/tiny.yaml"),
            "--out",
            str(tmp_path),
            "--run-name",
            "down",
            "--set",
            "judge={type: 'tests.test_eval_gaps:AlwaysDown'}",
            "--set",
            "seeds=[0]",
            "--set",
            "reliability.judge_failure_budget=20",
        ]
    )
    assert code == 3  # stopped with a checkpoint
    run_dir = tmp_path / "down"
    evals = read_table(run_dir, "evals")
    assert (
        len(evals) > 0 and evals["share"].isna().all() and (evals["n"] == 0).all() and evals["eval_reward"].isna().all()
    )
    episodes = read_table(run_dir, "episodes")
    assert len(episodes) == 16 and episodes["reward"].isna().all()  # 16 eval + 16 training failures passed 20
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and "failed 32 calls in a row" in manifest["stop_reason"]
    assert pd.isna(evals["eval_quality"]).all()
