"""The GPU recipe (scenarios/gpu_moe.yaml) is checked here the way its README section says a user
checks it: `--dry-run` on a stand-in Hub checkpoint (the tiny Qwen2-MoE), with the judge's key
unset (a warning, never a value) and then set (never printed)."""

import json
from pathlib import Path

from testbed.cli import run_command as cli

ROOT = Path(__file__).resolve().parent.parent
RECIPE = str(ROOT / "scenarios" / "gpu_moe.yaml")


def plan_of(capsys, checkpoint: Path) -> tuple[dict, str]:
    code = cli.main([RECIPE, "--set", f"policy.checkpoint={checkpoint}", "--dry-run", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.out + out.err


def test_the_gpu_recipe_plans_a_hub_checkpoint_the_llm_judge_and_the_ray_runtime(
    shared_cache, capsys, monkeypatch, tmp_path
):
    from testbed.models.tiny_hub import tiny_hub_checkpoint

    stand_in = tiny_hub_checkpoint(shared_cache)
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZAI_API_KEY", raising=False)
    plan, _ = plan_of(capsys, stand_in)
    assert plan["policy"]["checkpoint"] == str(stand_in) and plan["policy"]["parameters"] > 0
    said = json.dumps(plan)
    assert "zai/glm-4.7" in said and "ZAI_API_KEY" in said
    assert plan["runtime"]["kind"] == "sync" and [a["name"] for a in plan["arms"]] == ["sao", "running_mean"]
    assert plan["episodes"]["total"] == 4096 * 2
    monkeypatch.setenv("ZAI_API_KEY", "zk-not-a-real-key-4711")
    _, everything = plan_of(capsys, stand_in)
    assert "zk-not-a-real-key-4711" not in everything
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())  # a dry run writes no cache


def test_the_recipe_without_a_checkpoint_names_the_field(capsys):
    code = cli.main([RECIPE, "--dry-run"])
    assert code == 2
    assert "policy.checkpoint" in capsys.readouterr().err
