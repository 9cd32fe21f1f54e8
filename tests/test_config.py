"""Scenario loading: good files parse, every kind of bad input names the file, field and problem."""

from pathlib import Path

import pytest
import yaml

from testbed.scenario.schema import ScenarioError, apply_override, load_scenario

ROOT = Path(__file__).resolve().parent.parent

GOOD = {
    "name": "t",
    "schedule": {
        "type": "piecewise",
        "args": {
            "phases": [
                {"style": "cute", "start": 0.0, "end": 0.5, "candidates": ["cute", "academic"]},
                {"style": "academic", "start": 0.5, "end": 1.0},
            ]
        },
    },
    "arms": [{"name": "rm", "type": "running_mean", "args": {"window": 16}}],
    "budget": {"episodes": 100},
}


def write(tmp_path: Path, data) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_for(tmp_path: Path, data, overrides=None) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, data), overrides)
    return str(info.value)


def mutate(path: str, value):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[int(keys[-1]) if isinstance(node, list) else keys[-1]] = value
    return data


def test_shipped_scenarios_load(shared_cache):
    from testbed.cli.sweep_grid import expand, is_sweep_file, load_sweep
    from testbed.models.tiny_hub import tiny_hub_checkpoint

    # The GPU recipes name a checkpoint the user fills in: the tiny Qwen2-MoE stands in for it.
    stand_in = tiny_hub_checkpoint(shared_cache)
    needs_checkpoint = {name: [f"policy.checkpoint={stand_in}"] for name in ("gpu_moe.yaml", "gpu_moe_8x.yaml")}
    sweeps = 0
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        if is_sweep_file(path):  # a sweep: every point of its grid is validated as a scenario
            points = expand(load_sweep(path, [], [], None))
            assert len(points) > 1
            sweeps += 1
            continue
        scenario = load_scenario(path, needs_checkpoint.get(path.name, []))
        assert scenario.arms and scenario.budget.episodes > 0
    assert sweeps >= 2


def test_a_sweep_file_given_to_the_run_command_says_what_it_is():
    with pytest.raises(ScenarioError, match="is a sweep file.*python -m testbed.sweep"):
        load_scenario(ROOT / "scenarios" / "regimes.yaml")


def test_good_scenario_defaults(tmp_path):
    s = load_scenario(write(tmp_path, GOOD))
    assert s.judge.type == "rubric" and s.seeds == [0]
    assert "candidates" not in s.schedule.args["phases"][1]  # filled from world.archetypes when built
    assert s.schedule_object().target(s.budget.episodes - 1).candidates == tuple(s.world.archetypes)


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="not found: .*nope.yaml"):
        load_scenario(tmp_path / "nope.yaml")


def test_malformed_yaml(tmp_path):
    msg = error_for(tmp_path, "name: [unclosed\n")
    assert "scenario.yaml" in msg and "not valid YAML" in msg


def test_unknown_key_suggests_the_near_miss(tmp_path):
    msg = error_for(tmp_path, {**GOOD, "budgte": {"episodes": 3}})
    assert "scenario.yaml" in msg and "unknown key 'budgte'" in msg and "did you mean 'budget'" in msg


def test_unknown_nested_key(tmp_path):
    msg = error_for(tmp_path, mutate("budget", {"episodes": 10, "episods": 3}))
    assert "budget.episods" in msg and "did you mean 'episodes'" in msg


def test_wrong_type_names_field_and_value(tmp_path):
    msg = error_for(tmp_path, mutate("budget.episodes", "many"))
    assert "budget.episodes" in msg and "'many'" in msg


def test_unknown_trainer_lists_known(tmp_path):
    msg = error_for(tmp_path, mutate("arms.0.type", "sa0"))
    assert "arms.0.type" in msg and "unknown trainer 'sa0'" in msg and "running_mean" in msg


def test_unknown_judge_lists_known(tmp_path):
    msg = error_for(tmp_path, {**GOOD, "judge": "gpt"})
    assert "unknown judge 'gpt'" in msg and "rubric" in msg


def test_unknown_schedule_kind(tmp_path):
    msg = error_for(tmp_path, mutate("schedule.type", "sawtooth"))
    assert "schedule" in msg and "sawtooth" in msg and "piecewise" in msg


def test_style_not_in_world(tmp_path):
    msg = error_for(tmp_path, mutate("schedule.args.phases.1.style", "baroque"))
    assert "schedule.args.phases.1.style" in msg and "baroque" in msg


def test_overlapping_phases(tmp_path):
    msg = error_for(tmp_path, mutate("schedule.args.phases.1.start", 0.4))
    assert "schedule.args.phases" in msg and "overlaps" in msg


def test_gap_between_phases(tmp_path):
    msg = error_for(tmp_path, mutate("schedule.args.phases.1.start", 0.6))
    assert "gap" in msg


def test_last_phase_must_cover_budget(tmp_path):
    msg = error_for(tmp_path, mutate("schedule.args.phases.1.end", 0.9))
    assert "must end at 1.0" in msg


def test_bad_trainer_argument_is_caught_at_load(tmp_path):
    msg = error_for(tmp_path, mutate("arms.0.args", {"windw": 16}))
    assert "arms.0.args.windw" in msg and "did you mean 'window'" in msg


def test_impossible_budget(tmp_path):
    msg = error_for(tmp_path, mutate("budget.episodes", 0))
    assert "budget.episodes" in msg and "greater than 0" in msg


def test_overrides(tmp_path):
    s = load_scenario(write(tmp_path, GOOD), ["budget.episodes=700", "arms.0.args.lr=0.5", "seeds=[1, 2]"])
    assert s.budget.episodes == 700 and s.arms[0].args["lr"] == 0.5 and s.seeds == [1, 2]


def test_bad_override(tmp_path):
    msg = error_for(tmp_path, GOOD, ["arms.3.name=x"])
    assert "arms.3" in msg
    with pytest.raises(ScenarioError, match="key=value"):
        apply_override({}, "budget.episodes")


def test_plugin_class_path(tmp_path):
    data = {**GOOD, "judge": {"type": "judges.rubric:RubricJudge", "args": {"seed": 3}}}
    s = load_scenario(write(tmp_path, data))
    assert s.judge.path == "judges.rubric:RubricJudge"
