"""The upper-bound baseline (`running_mean` with `baseline: oracle`): each episode's advantage is its
reward minus the mean reward of k more samples of its prompt, drawn and judged by the synchronous
runtime without moving the clock and never trained on, their judge calls counted apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from testbed.cli.run_command import main
from testbed.store import read_table
from tests.test_trainers import TOK, policy, rollouts
from trainers.running_mean import RunningMeanConfig, RunningMeanTrainer

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
ORACLE = "{name: oracle, type: running_mean, args: {episodes_per_update: 16, baseline: oracle, baseline_samples: 2}}"


@pytest.mark.parametrize(
    "args, text",
    [({"baseline": "oracle"}, "baseline_samples >= 2"), ({"baseline_samples": 4}, "goes with baseline: oracle")],
)
def test_settings_that_do_not_go_together_name_the_field(args, text):
    with pytest.raises(ValidationError, match=text):
        RunningMeanConfig.model_validate(args)


def test_the_advantage_is_the_reward_minus_the_prompts_own_baseline():
    model = policy()
    trainer = RunningMeanTrainer(
        model, {"episodes_per_update": 4, "baseline": "oracle", "baseline_samples": 2}, pad_id=TOK.pad_id
    )
    batch = rollouts(model, 4, rewards=[1, 0, 1, 1])
    for traj, b in zip(batch, [0.5, 0.0, None, 1.0]):  # the third prompt's samples all failed: the window
        traj.baseline_reward = b
    metrics = trainer.update(batch)
    # A = 1 - 0.5, 0 - 0, (1 - the window's mean over rewards 1, 0, 1 = 1/3), 1 - 1
    assert metrics["advantage_abs_mean"] == pytest.approx((0.5 + 0 + 1 / 3 + 0) / 4)
    assert trainer.baseline_samples == 2


def test_a_run_draws_and_counts_the_baseline_samples_and_keeps_its_clock(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    args = [SCENARIO, "--out", str(tmp_path), "--run-name", "r", "--no-report", "--set", "seeds=[0]"]
    assert main([*args, "--set", "budget.episodes=48", "--set", f"arms=[{ORACLE}]"]) == 0
    episodes = read_table(tmp_path / "r", "episodes")
    judged = episodes[episodes["judge_error"].isna()]
    assert sorted(judged["t"]) == list(range(48))  # the extra samples move no clock and write no episode
    updates = read_table(tmp_path / "r", "updates")
    assert updates["baseline_judge_calls"].tolist() == [2 * 16 * u for u in updates["update"]]


def test_the_upper_bound_baseline_outside_the_synchronous_runtime_is_refused(tmp_path, capsys):
    args = [SCENARIO, "--out", str(tmp_path), "--set", f"arms=[{ORACLE}]", "--runtime", "ray"]
    assert main(args) == 2
    assert "arms.0.args.baseline_samples (oracle)" in capsys.readouterr().err


def test_explained_share_by_hand():
    from trainers.running_mean import explained_share

    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    assert explained_share(r, r - 0.5) == 0.0  # a constant baseline explains nothing
    assert explained_share(r, torch.zeros(4)) == 1.0  # b = r: everything
    assert explained_share(r, torch.tensor([0.5, -0.5, 0.0, 0.0])) == pytest.approx(1 - 0.125 / 0.25)
