"""A simulated run whose drift schedule is on the simulated clock (`schedule.clock: sim_seconds`),
killed with SIGKILL mid-run and continued with `--resume`, writes the rows of an uninterrupted
run: every judged clock once, the same responses, rewards and versions, the same simulated
times (start, done, judged, trained), the same targets on each side of the switch second, and
the same realised switch in the manifest. The checkpoint holds the cluster (events, versions,
its random streams) and the schedule's clock-to-seconds map, so nothing is redrawn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from testbed.cli.run_command import main
from testbed.store import read_table
from tests.watching import newest_mtime

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = "candidates: [academic, cute, chuunibyou]"
SETS = [
    "seeds=[0]",
    "budget.episodes=64",
    "eval.every=32",
    "eval.prompts=8",
    "eval.reference_samples=0",
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 8}}]",
    "runtime.kind=simulated",
    "runtime.max_staleness=2",
    "runtime.simulation={rollout_slots: 16, staleness_policy: drop, latency: {per_token_s: 0.05, spread: 0.8, "
    "straggler_share: 0.1, straggler_factor: 8}, learner: {fixed_s: 0.2, per_token_s: 0.0005, sync_s: 0.1}}",
    "schedule={type: piecewise, clock: sim_seconds, horizon_s: 100, args: {unit: seconds, phases: ["
    f"{{style: cute, start: 0, end: 3, {CANDIDATES}}}, {{style: chuunibyou, start: 3, end: 100, {CANDIDATES}}}]}}}}",
    "reliability.checkpoint_every=2",
    "output.flush_rows=8",
    "output.flush_seconds=600",
]
ARGS = ["tests/data/tiny.yaml", "--no-report", *[a for s in SETS for a in ("--set", s)]]
COLUMNS = [
    "t",
    "prompt_id",
    "response",
    "reward",
    "target_style",
    "generation_target",
    "policy_version",
    "staleness",
    "sim_start_s",
    "sim_done_s",
    "sim_judged_s",
    "sim_trained_s",
]


def judged(run_dir: Path) -> pd.DataFrame:
    episodes = read_table(run_dir, "episodes")
    return episodes[episodes["judge_error"].isna()].sort_values("t").reset_index(drop=True)


def rows_after_a_checkpoint_inside(run_dir: Path) -> bool:
    """An episodes part written after a checkpoint taken two updates or more into the run (with
    episodes in flight, weight versions held, the schedule's clock map begun)."""
    inside = [p for p in run_dir.glob("checkpoints/*/u*.pt") if int(p.stem[1:]) >= 2]
    return newest_mtime(run_dir.glob("episodes.parquet/part-*.parquet")) > newest_mtime(inside) > 0


def test_sigkill_then_resume_on_the_simulated_clock_writes_the_uninterrupted_rows(tmp_path, shared_cache, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    assert main([*ARGS, "--out", str(tmp_path), "--run-name", "whole"]) == 0
    whole = judged(tmp_path / "whole")
    switch = json.loads((tmp_path / "whole" / "manifest.json").read_text())["arms"]["rm"]["0"]["switch_points"]
    assert whole["t"].tolist() == list(range(64)) and len(switch) == 1  # the switch second falls inside the run

    # Killed as soon as an episodes part is written after a checkpoint: rows the resume must roll back.
    run_dir = tmp_path / "killed"
    env = {**os.environ, "TESTBED_CACHE": str(shared_cache), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.run", *ARGS, "--out", str(tmp_path), "--run-name", "killed"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if rows_after_a_checkpoint_inside(run_dir):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    assert proc.wait() == -signal.SIGKILL, "the run finished (or failed) before it could be killed"
    assert main(["--resume", str(run_dir), "--no-report"]) == 0

    resumed = judged(run_dir)
    assert resumed["t"].tolist() == list(range(64))  # every clock once: none lost, none twice
    pd.testing.assert_frame_equal(resumed[COLUMNS], whole[COLUMNS])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["arms"]["rm"]["0"]["switch_points"] == switch
    resume = manifest["resumes"][0]
    assert resume["checkpoint"].startswith("checkpoints/rm-seed0/u") and resume["discarded_parts"]
    assert int(Path(resume["checkpoint"]).stem[1:]) >= 2
    updates = read_table(run_dir, "updates")
    assert updates["update"].tolist() == list(range(1, len(updates) + 1))
    reference = read_table(tmp_path / "whole", "updates")
    pd.testing.assert_frame_equal(
        updates[["update", "sim_s", "sim_published_s", "staleness_mean"]],
        reference[["update", "sim_s", "sim_published_s", "staleness_mean"]],
    )
