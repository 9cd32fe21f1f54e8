"""Crash, stop and resume through the real CLI: SIGKILL at random points, judge outages, NaN updates.

Every resumed run must end with the tables an uninterrupted run writes: each judged clock value
exactly once, the same responses and rewards (runs are seeded and checkpoints hold every RNG).
"""

import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from testbed.runtimes import checkpoint
from testbed.store import read_table
from tests.test_end_to_end import ROOT, run_cli
from tests.watching import newest_mtime

# Two arms (one with a critic); a checkpoint every 4 updates, an episodes part every round (16
# episodes) in between, so durable rows after the last checkpoint exist most of the time.
BASE = [
    "tests/data/tiny.yaml",
    "--set",
    "seeds=[0]",
    "--set",
    "budget.episodes=160",
    "--set",
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
    "{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 64, value_warmup_updates: 1}}]",
    "--set",
    "reliability.checkpoint_every=4",
    "--set",
    "output.flush_rows=16",
    "--set",
    "output.flush_seconds=600",
]
ARMS = ("rm", "sao")


def judged(run_dir: Path) -> pd.DataFrame:
    episodes = read_table(run_dir, "episodes")
    return episodes[episodes["judge_error"].isna()].sort_values(["arm", "t"]).reset_index(drop=True)


def check_complete(run_dir: Path, budget: int = 160) -> pd.DataFrame:
    episodes = judged(run_dir)
    for arm in ARMS:
        ts = episodes.loc[episodes["arm"] == arm, "t"].tolist()
        assert ts == list(range(budget)), f"{arm}: clock values missing or duplicated"
    updates = read_table(run_dir, "updates")
    for arm in ARMS:
        numbers = updates.loc[updates["arm"] == arm, "update"].tolist()
        assert numbers == list(range(1, len(numbers) + 1)) and numbers, f"{arm}: update rows missing or duplicated"
    evals = read_table(run_dir, "evals")
    assert not evals.duplicated(["arm", "seed", "t", "style"]).any()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "done"
    return episodes


def test_sigkill_at_random_points_then_resume_matches_an_uninterrupted_run(tmp_path, shared_cache):
    reference = run_cli([*BASE, "--out", str(tmp_path / "ref"), "--no-report"], tmp_path, cache=shared_cache)
    assert reference.returncode == 0, reference.stderr[-3000:]
    expected = check_complete(next((tmp_path / "ref").iterdir()))

    run_dir = tmp_path / "runs" / "killed"
    env = {
        "TESTBED_CACHE": str(shared_cache),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
    }
    rng = random.Random(7)

    def newest(pattern: str) -> float:
        return newest_mtime(run_dir.glob(pattern))

    def rows_after_checkpoint() -> bool:  # an episodes part written after the newest checkpoint
        return newest("episodes.parquet/part-*.parquet") > newest("checkpoints/*/*.pt") > 0

    # Kill 1 lands while the run starts (SFT policy loading, value pretraining, first rounds);
    # kills 2 and 3 as soon as durable rows exist after the newest checkpoint (the rows a resume
    # must roll back), after a random number of rounds; kill 4 at a random time, wherever it falls.
    args, kills = [*BASE, "--out", str(tmp_path / "runs"), "--run-name", "killed"], 0
    for attempt in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.run", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not (run_dir / "scenario.yaml").exists() and proc.poll() is None:
            time.sleep(0.02)
        if attempt in (1, 2):
            skip, seen, deadline = rng.randint(0, 3), newest("episodes.parquet/part-*.parquet"), time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                part = newest("episodes.parquet/part-*.parquet")
                if part > seen:
                    seen, skip = part, skip - 1
                    if skip < 0 and rows_after_checkpoint():
                        break
                time.sleep(0.005)
        else:
            time.sleep(rng.uniform(0.2, 2.0) if attempt == 0 else rng.uniform(2.0, 8.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        args = ["--resume", str(run_dir)]
    assert kills >= 3, "the run finished before it could be killed"
    final = run_cli(["--resume", str(run_dir), "--no-report"], tmp_path, cache=shared_cache)
    assert final.returncode == 0, final.stderr[-3000:]

    got = check_complete(run_dir)
    columns = ["arm", "t", "prompt_id", "response", "reward", "judged_style", "policy_version"]
    pd.testing.assert_frame_equal(got[columns], expected[columns])  # the resumed curve continues the old one
    resumes = json.loads((run_dir / "manifest.json").read_text())["resumes"]
    assert any(r["checkpoint"] and "final" not in r["checkpoint"] for r in resumes), "no resume inside an arm"
    assert any(r["discarded_parts"] for r in resumes), "no kill left rows after a checkpoint"

    # Every checkpoint left behind loads into a fresh trainer of its arm.
    from testbed import registry
    from testbed.models.policy import build_policy
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import load_scenario

    scenario = load_scenario(run_dir / "scenario.yaml")
    files = sorted((run_dir / "checkpoints").glob("*/*.pt"))
    assert {p.parent.name for p in files} == {"rm-seed0", "sao-seed0"} and any(p.name == "final.pt" for p in files)
    for path in files:
        state = checkpoint.load(path)
        arm = next(a for a in scenario.arms if a.name == state["arm"])
        tokenizer = WordTokenizer.build()
        policy = build_policy(scenario.policy, tokenizer)
        trainer = registry.build(arm.trainer_class(), arm.args, policy, pad_id=tokenizer.pad_id)
        trainer.load_state_dict(state["trainer"])
        assert torch.equal(policy.state_dict()["lm_head.weight"], state["trainer"]["policy"]["lm_head.weight"])


class FlakyJudge:
    """The rubric judge, answering with an error for judge calls [down_from, down_to) of this
    process, and from call `down_from` on while `down_file` exists."""

    def __init__(self, down_from: int = 0, down_to: int = 0, down_file: str | None = None):
        from judges.rubric import RubricJudge

        self.inner, self.calls = RubricJudge(), 0
        self.down_from, self.down_to, self.down_file = down_from, down_to, down_file

    async def judge(self, requests):
        from testbed.types import Verdict

        out = []
        for verdict in await self.inner.judge(requests):
            down = self.down_from <= self.calls and (
                self.calls < self.down_to or (self.down_file is not None and Path(self.down_file).exists())
            )
            self.calls += 1
            out.append(Verdict.failed("503 service unavailable") if down else verdict)
        return out


# no reference evaluation: FlakyJudge counts this process's calls, and the outage must fall in training
ONE_ARM = [
    "tests/data/tiny.yaml",
    "--set",
    "seeds=[0]",
    "--set",
    "budget.episodes=160",
    "--set",
    "eval.reference_samples=0",
    "--set",
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}]",
]


def test_a_judge_outage_is_a_reported_gap_not_zeros(tmp_path, shared_cache):
    proc = run_cli(
        [
            *ONE_ARM,
            "--out",
            str(tmp_path / "runs"),
            "--set",
            "judge={type: 'tests.test_resume:FlakyJudge', args: {down_from: 60, down_to: 110}}",
        ],
        tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    episodes = read_table(run_dir, "episodes")
    failed = episodes[episodes["judge_error"].notna()]
    assert len(failed) > 0 and failed["reward"].isna().all()  # no zeros stand in for missing verdicts
    assert sorted(judged(run_dir)["t"]) == list(range(160))  # the clock waited through the outage
    totals = json.loads((run_dir / "manifest.json").read_text())["arms"]["rm"]["0"]
    assert totals["judge_failures"] == len(failed) == sum(o["failed_calls"] for o in totals["judge_outages"])
    assert totals["judge_outages"][0]["t"] == failed["t"].min()
    assert "judge outages, rm seed 0: 1" in " ".join(proc.stderr.split())
    assert f"judge outages in rm seed 0: t={failed['t'].min()}" in (run_dir / "summary.md").read_text()


def test_judge_failure_budget_stops_with_a_checkpoint_and_resume_finishes(tmp_path, shared_cache):
    flag = tmp_path / "judge-is-down"
    flag.touch()
    run_dir = tmp_path / "runs" / "outage"
    proc = run_cli(
        [
            *ONE_ARM,
            "--out",
            str(tmp_path / "runs"),
            "--run-name",
            "outage",
            "--set",
            f"judge={{type: 'tests.test_resume:FlakyJudge', args: {{down_from: 100, down_file: '{flag}'}}}}",
            "--set",
            "reliability.judge_failure_budget=32",
        ],
        tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    in_a_row = int(re.search(r"the judge failed (\d+) calls in a row", said).group(1))
    assert 32 <= in_a_row < 32 + 16 and f"--resume {run_dir}" in said  # stops in the round that spends the budget
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped"
    stopped_at = judged(run_dir)["t"].max()

    flag.unlink()  # the judge is back
    resumed = run_cli(["--resume", str(run_dir), "--no-report"], tmp_path, cache=shared_cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    episodes = judged(run_dir)
    assert episodes["t"].tolist() == list(range(160)) and 0 < stopped_at < 159
    failed = read_table(run_dir, "episodes")["judge_error"].notna().sum()
    assert failed == in_a_row  # the stop's failed calls are kept, once


class NaNGradientsTrainer:
    """The running-mean trainer whose gradients turn NaN from its 4th update on (a numerical
    blow-up that a skipped step does not cure)."""

    def __new__(cls, policy, **kwargs):  # the loop's inputs and the arm's args, as keywords
        from trainers.running_mean import RunningMeanTrainer

        trainer = RunningMeanTrainer(policy, **kwargs)
        update = trainer.update

        def poisoned(batch):
            if trainer.version >= 3 and not hasattr(trainer, "hook"):
                trainer.hook = next(policy.parameters()).register_hook(lambda grad: grad * float("nan"))
            return update(batch)

        trainer.update = poisoned
        return trainer


def test_nan_updates_are_skipped_then_stop_the_run_naming_arm_update_and_quantity(tmp_path, shared_cache):
    proc = run_cli(
        [
            *ONE_ARM,
            "--out",
            str(tmp_path / "runs"),
            "--set",
            "arms.0.type=tests.test_resume:NaNGradientsTrainer",
            "--set",
            "reliability.max_nonfinite_updates=3",
        ],
        tmp_path,
        cache=shared_cache,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    assert "arm rm seed 0 update 6: policy grad norm was NaN/inf in 3 updates in a row" in said, said
    run_dir = next((tmp_path / "runs").iterdir())
    updates = read_table(run_dir, "updates")
    assert updates["nonfinite"].fillna("-").tolist() == ["-"] * 3 + ["policy grad norm"] * 3
    assert updates["skipped_steps"].tolist() == [0, 0, 0, 1, 1, 1]
    state = checkpoint.load(run_dir / "checkpoints" / "rm-seed0" / "u000006.pt")  # written at the stop
    assert state["trainer"]["version"] == 3 and torch.isfinite(state["trainer"]["policy"]["lm_head.weight"]).all()


def test_an_update_that_breaks_the_policy_stops_the_run_before_sampling_from_it(tmp_path, shared_cache):
    # An absurd learning rate: the first step is finite but the weights it leaves give NaN logits.
    proc = run_cli(
        [*ONE_ARM, "--out", str(tmp_path / "runs"), "--set", "arms.0.args.lr=1.0e+30"], tmp_path, cache=shared_cache
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    said = " ".join(proc.stderr.split())
    assert re.search(r"arm rm seed 0 update \d+: the policy \(version \d+\) gives NaN/inf logits", said), said
    assert "Traceback" not in proc.stderr
