"""A tiny scenario through the real CLI: SFT (cached), the loop, the store and the report."""

import json
import subprocess
import sys
from pathlib import Path

from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent


def run_cli(args, tmp_path, **kw):
    env = {
        "TESTBED_CACHE": str(kw.pop("cache", tmp_path / "cache")),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "testbed.run", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def test_tiny_scenario_end_to_end(tmp_path, shared_cache):
    proc = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs")], tmp_path, cache=shared_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.startswith("tiny-")

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["switch_points"] == [64, 112]
    assert set(manifest["arms"]["running_mean"]) == {"0", "1"}
    assert (run_dir / "scenario.yaml").exists()

    episodes = read_table(run_dir, "episodes")
    for column in (
        "arm",
        "seed",
        "t",
        "prompt_id",
        "topic",
        "target_style",
        "judged_style",
        "r_quality",
        "r_style",
        "reward",
        "judge_error",
        "policy_version",
        "staleness",
        "response_tokens",
    ):
        assert column in episodes.columns
    for seed in (0, 1):
        ts = episodes[(episodes.seed == seed) & episodes.judge_error.isna()]["t"].sort_values().tolist()
        assert ts == list(range(160))  # every clock value once: nothing lost, nothing doubled
    targets = episodes[episodes.seed == 0].set_index("t")["target_style"]
    assert targets[63] == "cute" and targets[64] == "chuunibyou" and targets[112] == "classical"
    assert ((episodes.reward == episodes.r_quality * episodes.r_style) | episodes.judge_error.notna()).all()
    assert episodes["gold_reward"].isna().all() and not (run_dir / "goodhart.csv").exists()  # no gold judge

    updates = read_table(run_dir, "updates")
    assert len(updates) == 2 * (160 // 16)
    assert updates["policy_loss"].notna().all()
    learning = updates[updates["advantage_abs_mean"] > 0]
    assert len(learning) > 0 and (learning["policy_grad_norm"] > 0).all()  # a reward signal moves the policy
    assert episodes["reward"].sum() > 0

    evals = read_table(run_dir, "evals")
    shares = evals.groupby(["seed", "t"])["share"].sum()
    assert ((shares - 1.0).abs() < 1e-6).all()  # each evaluation's style shares add up to 1
    assert sorted(evals[evals.seed == 0]["t"].unique()) == [0, 64, 128, 160]

    # the report written at the end of every run
    assert (run_dir / "summary.md").exists() and (run_dir / "summary.csv").exists()
    assert (run_dir / "figures" / "realignment.png").stat().st_size > 10_000
    # the console ends briefly: where the report is, a line per switch, the final reward, the time
    lines = proc.stderr.splitlines()
    ending = lines[next(i for i, line in enumerate(lines) if line.startswith(f"report in {run_dir}")) :]
    assert len(ending) <= 15 and all(len(line) <= 120 for line in ending), ending
    assert "switch 1 (cute → chuunibyou at t=64): one arm, nothing to compare" in ending
    assert any(line.startswith("final reward (last ") and "mean over 2 seeds" in line for line in ending)
    assert ending[-1].startswith("time: ") and "Realignment after each switch" not in proc.stderr


def test_second_run_reuses_the_cached_policy(tmp_path):
    quick = ["--set", "seeds=[0]", "--set", "budget.episodes=32", "--set", "policy.sft.steps=5", "--no-report"]
    first = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *quick], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Training the SFT policy" in first.stderr
    second = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), *quick], tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "SFT policy from cache" in second.stderr and "Training the SFT policy" not in second.stderr


def test_bad_scenario_exits_with_a_clear_error(tmp_path):
    proc = run_cli(["tests/data/tiny.yaml", "--out", str(tmp_path / "runs"), "--set", "arms.0.type=sao2"], tmp_path)
    assert proc.returncode == 2
    assert "unknown trainer 'sao2'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing is created for a scenario that cannot run


class BrokenJudge:
    """A judge that is down: every verdict carries an error."""

    async def judge(self, requests):
        from testbed.types import Verdict

        return [Verdict.failed("connection refused") for _ in requests]


def test_a_judge_that_always_fails_stops_the_run_with_a_message(tmp_path, shared_cache):
    proc = run_cli(
        [
            "tests/data/tiny.yaml",
            "--out",
            str(tmp_path / "runs"),
            "--set",
            "seeds=[0]",
            "--set",
            "judge={type: 'tests.test_end_to_end:BrokenJudge'}",
            "--set",
            "reliability.judge_failure_budget=300",
        ],
        tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 3
    assert "the judge failed 304 calls in a row" in proc.stderr and "connection refused" in proc.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    episodes = read_table(run_dir, "episodes")
    # 304 = the 16 failed calls of the held-out evaluation at t=0 (they count toward the budget)
    # + 18 rounds of 16 training episodes, every one kept with its error
    assert len(episodes) == 18 * 16 and episodes["judge_error"].notna().all()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and "--resume" in manifest["stop_reason"]
    assert (run_dir / "checkpoints" / "running_mean-seed0" / "u000000.pt").exists()
