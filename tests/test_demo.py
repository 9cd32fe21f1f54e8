"""`make demo` (scenarios/demo.yaml) through the real CLI, run once for every test here: its SFT
policy passes its acceptance bar, every arm realigns after each switch (what
figures/realignment.png shows: the new target's held-out share rises, the old one's falls), and
the console ends in a few lines. The arms run one after another (`runtime.parallel_arms=false`:
each writes the rows it writes side by side on Ray, tests/test_ray_runtime.py), so the test does
not start Ray beside the other test worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("sao", "running_mean", "grpo")
CLI_ENV = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # as run_cli's


@pytest.fixture(scope="module")
def demo(tmp_path_factory, shared_cache) -> tuple[Path, str]:
    """(run directory, stderr) of one demo run."""
    out = tmp_path_factory.mktemp("demo")
    env = {**CLI_ENV, "TESTBED_CACHE": str(shared_cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.run", "scenarios/demo.yaml", "--out", str(out)]
        + ["--set", "runtime.parallel_arms=false"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1]), proc.stderr


def held_out_shares(run_dir: Path, arm: str) -> pd.DataFrame:
    """The arm's held-out share per evaluation (rows: clock t) and style (columns)."""
    evals = read_table(run_dir, "evals")
    return evals[evals["arm"] == arm].pivot_table(index="t", columns="style", values="share", fill_value=0.0)


def phases(run_dir: Path) -> list[tuple[int, int, str, str]]:
    """(switch t, end of the phase it starts, old target, new target) for every switch."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    bounds = [0, *manifest["switch_points"], manifest["budget"]]
    episodes = read_table(run_dir, "episodes")
    targets = [episodes.loc[episodes["t"] == t, "target_style"].iloc[0] for t in bounds[:-1]]
    return [(bounds[i], bounds[i + 1], targets[i - 1], targets[i]) for i in range(1, len(targets))]


def test_the_demo_sft_policy_passes_its_acceptance_bar(demo):
    run_dir, stderr = demo
    sft = json.loads((run_dir / "manifest.json").read_text())["sft"]
    assert sft["passed"] is True, sft["eval"]
    assert "warning:" not in stderr and "acceptance bar" not in stderr


@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_learns_each_new_target_and_drops_the_old_one(demo, arm):
    run_dir, _ = demo
    shares = held_out_shares(run_dir, arm)
    switches = phases(run_dir)
    assert [(new, old) for _, _, old, new in switches] == [("chuunibyou", "cute"), ("classical", "chuunibyou")]
    for start, end, old, new in switches:
        at_switch, at_end = shares.loc[shares.index <= start].iloc[-1], shares.loc[shares.index <= end].iloc[-1]
        assert at_end[new] > at_switch[new], f"{arm}: {new}'s share {at_switch[new]:.2f} -> {at_end[new]:.2f}"
        assert at_end[old] < at_switch[old], f"{arm}: {old}'s share {at_switch[old]:.2f} -> {at_end[old]:.2f}"
    assert (run_dir / "figures" / "realignment.png").stat().st_size > 10_000


def test_the_demo_console_ends_in_a_few_lines(demo):
    run_dir, stderr = demo
    lines = stderr.splitlines()
    ending = lines[next(i for i, line in enumerate(lines) if line.startswith(f"report in {run_dir}")) :]
    assert len(ending) <= 15 and all(len(line) <= 120 for line in ending), ending
    assert [line for line in ending if line.startswith("switch ")] == [
        "switch 1 (cute → chuunibyou at t=512): one seed: no verdict",
        "switch 2 (chuunibyou → classical at t=896): one seed: no verdict",
    ]
    assert any(line.startswith("final reward (last ") and "sao" in line and "grpo" in line for line in ending)
    assert ending[-1].startswith("time: ") and "Realignment after each switch" not in stderr
