"""One size field for every trainer's update, `episodes_per_update`: GRPO's must be whole groups,
and the former spellings (`batch_size`, `prompts_per_update`) are refused with the new one."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from testbed.scenario.loading import ScenarioError
from testbed.scenario.schema import load_scenario
from trainers.grpo import GRPOConfig
from trainers.running_mean import RunningMeanConfig
from trainers.sao import SAOConfig

SCENARIO = str(Path(__file__).resolve().parent / "data" / "golden.yaml")


def refusal(trainer: str, args: str) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(SCENARIO, [f"arms=[{{name: a, type: {trainer}, args: {args}}}]"])
    return str(info.value)


@pytest.mark.parametrize("trainer", ["sao", "running_mean"])
def test_batch_size_is_refused_with_episodes_per_update(trainer):
    said = refusal(trainer, "{batch_size: 24}")
    assert "arms.0.args: batch_size: 24 is now episodes_per_update: 24" in said


def test_prompts_per_update_is_refused_with_the_episodes_it_meant():
    said = refusal("grpo", "{group_size: 4, prompts_per_update: 6}")
    assert (
        "arms.0.args: prompts_per_update: 6 is now episodes_per_update: 24 (prompts_per_update x group_size = 6 x 4)"
        in said
    )


def test_prompts_per_update_alone_counts_the_default_group():
    with pytest.raises(ValidationError, match=r"episodes_per_update: 32 \(prompts_per_update x group_size = 4 x 8\)"):
        GRPOConfig.model_validate({"prompts_per_update": 4})


def test_grpo_episodes_must_be_whole_groups():
    said = refusal("grpo", "{group_size: 8, episodes_per_update: 20}")
    assert "arms.0.args: episodes_per_update (20) is not a multiple of group_size (8)" in said
    assert "use 16 or 24" in said
    with pytest.raises(
        ValidationError, match=r"episodes_per_update \(3\) is not a multiple of group_size \(4\).*; use 4 \["
    ):
        GRPOConfig.model_validate({"group_size": 4, "episodes_per_update": 3})


def test_one_size_field_and_its_defaults():
    assert SAOConfig().episodes_per_update == RunningMeanConfig().episodes_per_update == 32
    grpo = GRPOConfig.model_validate({"group_size": 4, "episodes_per_update": 16})
    assert (grpo.episodes_per_update, grpo.group_size) == (16, 4)
    assert GRPOConfig().episodes_per_update == 32 and GRPOConfig().group_size == 8  # 4 prompts x 8, as before
    for config in (SAOConfig, RunningMeanConfig, GRPOConfig):
        assert "batch_size" not in config.model_fields and "prompts_per_update" not in config.model_fields


def test_a_scenario_with_the_new_field_loads_and_sizes_each_arm():
    scenario = load_scenario(SCENARIO)
    sizes = {arm.name: arm.trainer_class().Config.model_validate(arm.args).episodes_per_update for arm in scenario.arms}
    assert sizes == {"running_mean": 16, "sao": 16, "grpo": 16}
