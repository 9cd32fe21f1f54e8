"""Hostile or careless scenario input: each case is a ScenarioError that names the file, field,
key or value, raised while loading (so before a run directory exists), never another exception."""

import math
import os
from pathlib import Path

import pytest
import yaml

from testbed.scenario.schema import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "data" / "bad"

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


def write(tmp_path: Path, data, name="scenario.yaml") -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_for(path, overrides=None) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    return str(info.value)


@pytest.mark.parametrize("seeds", ["[-1]", "[4294967296]", "[0, -5]"])
def test_seeds_outside_numpy_range_are_refused(tmp_path, seeds):
    msg = error_for(write(tmp_path, GOOD), [f"seeds={seeds}"])
    assert "seeds." in msg and ("greater than or equal to 0" in msg or "less than or equal to 4294967295" in msg)


def test_the_largest_seed_is_accepted(tmp_path):
    assert load_scenario(write(tmp_path, GOOD), ["seeds=[0, 4294967295]"]).seeds == [0, 4294967295]


@pytest.mark.parametrize("field", ["world.archetypes", "world.styles"])
def test_an_empty_style_list_is_refused(tmp_path, field):
    msg = error_for(write(tmp_path, GOOD), [f"{field}=[]"])
    assert f"{field}: List should have at least 1 item" in msg


def test_duplicate_archetypes_are_refused(tmp_path):
    msg = error_for(write(tmp_path, GOOD), ["world.archetypes=[cute, cute, academic]"])
    assert "world.archetypes" in msg and "'cute' is listed twice" in msg


@pytest.mark.parametrize("value", ["[1,", "{a: 1", "'unclosed", "a: b: c"])
def test_malformed_yaml_in_an_override_names_the_key(tmp_path, value):
    msg = error_for(write(tmp_path, GOOD), [f"budget.episodes={value}"])
    assert "--set budget.episodes: the value is not valid YAML" in msg


@pytest.mark.parametrize("assignment", ["description=a\x01b", "description=\x1b[31mred", "descr\x00iption=x"])
def test_control_characters_in_an_override_are_refused(tmp_path, assignment):
    msg = error_for(write(tmp_path, GOOD), [assignment])
    assert "--set" in msg and "control character" in msg
    assert not any(ord(c) < 32 and c != "\n" for c in msg)  # echoed escaped, never raw


@pytest.mark.parametrize(
    "path",
    [
        "arms.0.args.lr",
        "arms.0.args.max_grad_norm",
        "sampling.temperature",
        "output.flush_seconds",
        "policy.sft.lr",
        "policy.sft.min_quality",
        "schedule.args.phases.0.end",
    ],
)
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_floats_are_refused_everywhere(tmp_path, path, value):
    msg = error_for(write(tmp_path, GOOD), [f"{path}={value}"])
    assert path in msg


@pytest.mark.parametrize(
    "trainer,arg", [("sao", "policy_lr"), ("sao", "critic_lr"), ("grpo", "lr"), ("running_mean", "lr")]
)
def test_every_trainer_refuses_an_infinite_learning_rate(tmp_path, trainer, arg):
    arms = f"arms=[{{name: a, type: {trainer}, args: {{{arg}: .inf}}}}]"
    msg = error_for(write(tmp_path, GOOD), [arms, "budget.episodes=1000"])
    assert f"arms.0.args.{arg}: Input should be a finite number" in msg


def test_a_non_utf8_file_is_named(tmp_path):
    path = write(tmp_path, (BAD / "not_utf8.yaml").read_bytes())
    msg = error_for(path)
    assert str(path) in msg and "not UTF-8" in msg and "line 3" in msg


def test_duplicate_keys_are_named_with_their_line(tmp_path):
    msg = error_for(BAD / "duplicate_key.yaml")
    assert "duplicate key 'budget'" in msg and "line 6" in msg and "line 5" in msg


def test_duplicate_keys_inside_an_override_value(tmp_path):
    msg = error_for(write(tmp_path, GOOD), ["budget={episodes: 10, episodes: 20}"])
    assert "--set budget" in msg and "duplicate key 'episodes'" in msg


MERGED = """
name: t
schedule:
  type: piecewise
  args:
    phases:
      - &first {style: cute, start: 0.0, end: 0.5, candidates: [cute, academic]}
      - {<<: *first, style: academic, start: 0.5, end: 1.0}
arms: [{name: rm, type: running_mean, args: {window: 16}}]
budget: {episodes: 100}
"""


def test_anchors_and_merge_keys_still_work(tmp_path):
    # a key given beside a merge overrides the merged one: that is YAML's rule, not a duplicate
    scenario = load_scenario(write(tmp_path, MERGED))
    assert [p["style"] for p in scenario.schedule.args["phases"]] == ["cute", "academic"]
    assert scenario.schedule.args["phases"][1]["candidates"] == ["cute", "academic"]


def test_a_directory_is_not_reported_as_missing(tmp_path):
    msg = error_for(tmp_path)
    assert f"{tmp_path} is a directory, not a scenario file" in msg


def test_a_pipe_is_not_read(tmp_path):
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)  # reading it would wait forever for a writer
    msg = error_for(pipe)
    assert f"{pipe} is not a regular file" in msg


def test_a_huge_file_is_refused_before_parsing(tmp_path, monkeypatch):
    path = write(tmp_path, yaml.safe_dump(GOOD) + "# padding\n" * 110_000)
    monkeypatch.setattr(yaml, "load", lambda *a, **k: pytest.fail("parsed a file over the size limit"))
    monkeypatch.setattr(yaml, "safe_load", lambda *a, **k: pytest.fail("parsed a file over the size limit"))
    msg = error_for(path)
    assert str(path) in msg and "1100" in msg and "the limit is 1000000 bytes" in msg


def test_an_alias_bomb_gets_a_short_error(tmp_path):
    msg = error_for(BAD / "alias_bomb.yaml")
    assert len(msg) < 1000 and "alias" in msg and "alias_bomb.yaml" in msg


def test_a_recursive_alias_gets_a_short_error(tmp_path):
    msg = error_for(write(tmp_path, yaml.safe_dump(GOOD) + "description: &loop [*loop]\n"))
    assert len(msg) < 1000 and "refers to itself" in msg


@pytest.mark.parametrize("text", ["description: " + "[" * 5000 + "]" * 5000, "description: " + "[" * 60 + "]" * 60])
def test_deep_nesting_gets_an_error_not_a_recursion_error(tmp_path, text):
    msg = error_for(write(tmp_path, yaml.safe_dump(GOOD) + text + "\n"))
    assert "nested" in msg and len(msg) < 1000


def test_long_values_are_clipped_in_messages(tmp_path):
    msg = error_for(write(tmp_path, GOOD), ["budget.episodes=" + "9x" * 50_000])
    assert "budget.episodes" in msg and len(msg) < 1000


def test_style_not_in_its_candidates_names_the_field_in_fractions():
    msg = error_for(BAD / "style_not_in_candidates.yaml")
    assert "schedule.args.phases.1.candidates" in msg and "'cute'" in msg and "0.5-1.0 of the budget" in msg
    assert "start=50" not in msg  # clock units are the last resort, not what the user wrote


def test_style_missing_from_defaulted_candidates_names_the_archetypes(tmp_path):
    data = {**GOOD, "world": {"archetypes": ["cute", "chuunibyou"]}}
    msg = error_for(write(tmp_path, data))
    assert "schedule.args.phases.1" in msg and "'academic'" in msg and "world.archetypes" in msg and "0.5-1.0" in msg


@pytest.mark.parametrize("trainer", ["..relative:Thing", "no_such_module_xyz:Thing", "json:no_such_attr"])
def test_a_trainer_path_that_does_not_load_is_a_scenario_error(tmp_path, trainer):
    msg = error_for(write(tmp_path, GOOD), [f"arms.0.type={trainer}"])
    assert "arms.0.type" in msg


def test_numbers_stay_finite_in_the_digest(tmp_path):
    scenario = load_scenario(write(tmp_path, GOOD))
    assert all(math.isfinite(v) for v in (scenario.sampling.temperature, scenario.output.flush_seconds))
    assert len(scenario.digest()) == 12
