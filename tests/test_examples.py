"""The example plugins in examples/, loaded the way a user's package is: from a directory on the
import path that is not part of the project, by an import path string. Each is checked against
the interface the run relies on (docs/plugins.md)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from testbed import registry
from testbed.engines.hf_engine import HFEngine
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.types import Target, Verdict
from testbed.world import STYLES, prompts, render_prompt

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# switch_at: fractions of the budget (2400 episodes below: clocks 800 and 1600)
RETURNING = {
    "styles": ["cute", "classical", "cute"],
    "switch_at": [1 / 3, 2 / 3],
    "candidates": ["academic", "classical", "cute"],
}


@pytest.fixture
def plugins(monkeypatch):
    """Load by import path with examples/ on sys.path, as PYTHONPATH=examples would."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield registry.import_path
    for name in ("custom_schedule", "custom_trainer"):
        sys.modules.pop(name, None)


def test_the_examples_come_from_outside_the_project_package(plugins):
    cls = plugins("custom_schedule:ReturningSchedule")
    assert cls.__module__ == "custom_schedule" and Path(sys.modules["custom_schedule"].__file__).parent == EXAMPLES


# ---- the schedule -----------------------------------------------------------------------------


def test_schedule_config_names_bad_keys(plugins):
    Config = plugins("custom_schedule:ReturningSchedule").Config
    for bad, field in (
        ({**RETURNING, "candiates": ["cute"]}, "candiates"),
        ({**RETURNING, "switch_at": "soon"}, "switch_at"),
        ({"switch_at": [10]}, "styles"),
    ):
        with pytest.raises(ValidationError) as err:
            Config.model_validate(bad)
        assert field in str(err.value)
    for bad, says in (
        ({**RETURNING, "switch_at": [0.3]}, "switch_at needs 2"),
        ({**RETURNING, "switch_at": [0.4, 0.4]}, "increasing"),
        ({**RETURNING, "candidates": ["cute"]}, r"lack the target styles \['classical'\]"),
    ):
        with pytest.raises(ValidationError, match=says):
            Config.model_validate(bad)


def test_schedule_targets_and_switch_points_agree(plugins):
    cls = plugins("custom_schedule:ReturningSchedule")
    schedule = registry.build(cls, RETURNING, budget=2400, archetypes=())  # built as the run builds it
    targets = [schedule.target(t) for t in range(2400)]
    assert all(type(x) is Target and isinstance(x.style, str) and isinstance(x.candidates, tuple) for x in targets)
    assert all(x.style in x.candidates and x.style in STYLES for x in targets)
    changes = [t for t in range(1, 2400) if targets[t].style != targets[t - 1].style]
    points = schedule.switch_points()
    assert points == changes == [800, 1600] and all(type(p) is int for p in points)
    assert [targets[t].style for t in (0, 800, 1600)] == ["cute", "classical", "cute"]


def test_schedule_example_runs_as_a_script():
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "custom_schedule.py")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    assert "switch points: [800, 1600]" in out.stdout


# ---- the trainer ------------------------------------------------------------------------------

TOK = WordTokenizer.build()
SMALL = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16)


def trajectories(model, n=6):
    """Real samples from the tiny policy, half of them rewarded."""
    torch.manual_seed(0)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=8))
    trajs = engine.generate([render_prompt(spec, ["cute", "academic"]) for spec in prompts("train")[:n]])
    for i, traj in enumerate(trajs):
        traj.verdict = Verdict(quality=1, style_match=i % 2, style="cute")
    return trajs


def test_trainer_config_names_bad_arguments(plugins):
    Config = plugins("custom_trainer:EMABaselineTrainer").Config
    assert Config.model_validate({"episodes_per_update": 12}).episodes_per_update == 12
    for bad, field in (
        ({"betta": 0.1}, "betta"),
        ({"lr": float("inf")}, "lr"),
        ({"beta": 2}, "beta"),
        ({"episodes_per_update": "many"}, "episodes_per_update"),
    ):
        with pytest.raises(ValidationError) as err:
            Config.model_validate(bad)
        assert field in str(err.value)


def test_trainer_updates_on_real_trajectories(plugins):
    cls = plugins("custom_trainer:EMABaselineTrainer")
    model = build_policy(SMALL, TOK, seed=0)
    trainer = cls(model, episodes_per_update=6, lr=1e-2, beta=0.5, pad_id=TOK.pad_id, temperature=1.0, seed=0)
    assert (trainer.group_size, trainer.episodes_per_update, trainer.version) == (1, 6, 0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = trainer.update(trajectories(model))
    assert metrics["nonfinite"] is None and metrics["skipped_steps"] == 0 and trainer.version == 1
    assert all(isinstance(v, float) for k, v in metrics.items() if k not in ("nonfinite", "skipped_steps"))
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    # rewards 0, 1, 0, 1, 0, 1 with beta 0.5: the baseline follows them
    assert trainer.baseline == pytest.approx(sum(0.5 ** (6 - i) for i in (1, 3, 5)))

    fresh = cls(build_policy(SMALL, TOK, seed=1), episodes_per_update=6, pad_id=TOK.pad_id, temperature=1.0, seed=0)
    fresh.load_state_dict(trainer.state_dict())
    assert (fresh.version, fresh.baseline) == (trainer.version, trainer.baseline)
    assert all(torch.equal(p, dict(model.named_parameters())[n]) for n, p in fresh.policy.named_parameters())


def test_trainer_skips_a_nonfinite_step_and_says_so(plugins):
    cls = plugins("custom_trainer:EMABaselineTrainer")
    model = build_policy(SMALL, TOK, seed=0)
    batch = trajectories(model)
    trainer = cls(model, episodes_per_update=6, pad_id=TOK.pad_id, temperature=1.0, seed=0)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    metrics = trainer.update(batch)
    assert metrics["nonfinite"] == "policy loss" and metrics["skipped_steps"] == 1
    assert trainer.version == 0 and trainer.baseline == 0.0 and math.isnan(metrics["policy_loss"])


# ---- both, through the scenario loader ---------------------------------------------------------


def scenario_file(tmp_path, schedule: dict, args: dict) -> Path:
    import yaml

    data = {
        "name": "plugins",
        "schedule": schedule,
        "seeds": [0],
        "budget": {"episodes": 2400},
        "arms": [{"name": "ema", "type": "custom_trainer:EMABaselineTrainer", "args": args}],
    }
    path = tmp_path / "plugins.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_scenario_loads_both_examples_and_names_their_bad_keys(plugins, tmp_path):
    from testbed.envs.schedules import check_schedule
    from testbed.scenario.schema import ScenarioError, load_scenario

    kind = {"type": "custom_schedule:ReturningSchedule"}
    scenario = load_scenario(scenario_file(tmp_path, {**kind, "args": RETURNING}, {"episodes_per_update": 8}))
    schedule = scenario.schedule_object()
    assert type(schedule).__name__ == "ReturningSchedule" and schedule.switch_points() == [800, 1600]  # in episodes
    check_schedule(schedule, 2400, STYLES)
    for schedule_keys, args, says in (
        ({**kind, "args": {**RETURNING, "switch_att": [1]}}, {}, "schedule.args.switch_att"),
        ({**kind, "args": RETURNING}, {"betta": 0.1}, "betta"),
        ({**kind, "args": RETURNING}, {"episodes_per_update": 5000}, "one update needs 5000 episodes"),
    ):
        with pytest.raises(ScenarioError, match=says):
            load_scenario(scenario_file(tmp_path, schedule_keys, args))


def test_a_custom_engine_runs_a_scenario_and_its_bad_arguments_are_named(
    plugins, tmp_path, monkeypatch, shared_cache, capsys
):
    from testbed.cli.run_command import main

    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    base = [
        str(ROOT / "tests/data/tiny.yaml"),
        "--out",
        str(tmp_path),
        "--set",
        "seeds=[0]",
        "--set",
        "budget.episodes=32",
    ]
    assert (
        main(
            [*base, "--run-name", "bad", "--set", "engine={type: 'custom_engine:CountingEngine', args: {max_btch: 8}}"]
        )
        == 2
    )
    assert "max_btch" in " ".join(capsys.readouterr().err.split()) and not (tmp_path / "bad").exists()
    assert (
        main(
            [*base, "--run-name", "ok", "--set", "engine={type: 'custom_engine:CountingEngine', args: {max_batch: 8}}"]
        )
        == 0
    )
    assert (tmp_path / "ok" / "summary.md").exists()
