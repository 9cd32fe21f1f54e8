"""Sweeps (testbed/cli/sweep_command.py): grid expansion, which arm runs where, and a tiny sweep through the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.cli.sweep_command import plan
from testbed.cli.sweep_grid import expand, load_sweep, parse_grid_flag
from testbed.scenario.loading import ScenarioError

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny.yaml"
ARMS = [
    {"name": "running_mean", "type": "running_mean", "args": {"window": 32, "episodes_per_update": 16}},
    {"name": "grpo", "type": "grpo", "args": {"group_size": 4, "episodes_per_update": 16}},
]


def sweep_file(tmp_path, grid, **extra):
    data = {
        "scenario": str(TINY),
        "name": "tinysweep",
        "set": {"seeds": [0], "arms": ARMS, "budget": {"episodes": 96}},
        "grid": grid,
        **extra,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_grid_flags_read_each_value_as_yaml():
    assert parse_grid_flag("arms.0.args.window=16,128") == ("arms.0.args.window", [16, 128])
    assert parse_grid_flag("world.hard_topics.share=0.0,0.5") == ("world.hard_topics.share", [0.0, 0.5])
    for bad in ("window", "=1,2", "a.b="):
        with pytest.raises(ScenarioError, match="expected key=v1,v2"):
            parse_grid_flag(bad)


def test_the_grid_is_the_product_of_its_axes_first_axis_slowest(tmp_path):
    path = sweep_file(
        tmp_path,
        {
            "arms.running_mean.args.window": [16, 32],
            "batch": {
                "small": {"arms.running_mean.args.episodes_per_update": 16, "arms.grpo.args.episodes_per_update": 16},
                "large": {"arms.running_mean.args.episodes_per_update": 32, "arms.grpo.args.episodes_per_update": 32},
            },
        },
    )
    points = expand(load_sweep(path, [], [], None))
    assert [p.label for p in points] == ["p00", "p01", "p02", "p03"]
    assert [tuple(p.values.values()) for p in points] == [
        ("16", "small"),
        ("16", "large"),
        ("32", "small"),
        ("32", "large"),
    ]
    p = points[3]
    rm = next(a for a in p.data["arms"] if a["name"] == "running_mean")
    grpo = next(a for a in p.data["arms"] if a["name"] == "grpo")
    assert rm["args"] == {"window": 32, "episodes_per_update": 32} and grpo["args"]["episodes_per_update"] == 32
    assert p.data["name"] == "tinysweep-p03" and "window=32" in p.data["description"]
    # the window changes only the running mean: GRPO runs once per batch size
    owners = plan(points)
    assert owners["p02"] == {"running_mean": "p02", "grpo": "p00"} and owners["p03"] == {
        "running_mean": "p03",
        "grpo": "p01",
    }


def test_a_scenario_with_grid_flags_overrides_and_seeds(tmp_path):
    sweep = load_sweep(TINY, ["arms.0.args.window=8,16"], ["budget.episodes=64"], "0,1,2")
    points = expand(sweep)
    assert len(points) == 2 and sweep.name == "tiny-sweep"
    assert all(p.data["budget"]["episodes"] == 64 and p.data["seeds"] == [0, 1, 2] for p in points)
    assert plan(points) == {"p00": {"running_mean": "p00"}, "p01": {"running_mean": "p01"}}


def test_settings_that_do_not_change_rows_share_work_and_those_that_do_do_not(tmp_path):
    path = sweep_file(
        tmp_path,
        {
            "runtime.parallel_arms": [False, True],
            "runtime.torch_threads": [1, 2],
            "reliability.checkpoint_every": [5, 20],
        },
    )
    owners = plan(expand(load_sweep(path, [], [], None)))
    assert all(arms == {"running_mean": "p00", "grpo": "p00"} for arms in owners.values())  # 8 points, one run
    path = sweep_file(tmp_path, {"runtime.parallel_arms": [False, True], "sampling.temperature": [1.0, 0.7]})
    owners = plan(expand(load_sweep(path, [], [], None)))
    assert [o["grpo"] for o in owners.values()] == ["p00", "p01", "p00", "p01"]  # the temperature changes the rows


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"arms.nobody.args.window": [1, 2]}, "no arm named 'nobody'"),
        ({"batch": [1, 2]}, "named axis"),
        ({"budget.episodes": []}, "non-empty list"),
        ({"arms.running_mean.args.window": [0, 16]}, r"point p00 .*window"),  # each point is validated as a scenario
    ],
)
def test_bad_grids_are_refused_naming_what_is_wrong(tmp_path, grid, message):
    with pytest.raises(ScenarioError, match=message):
        expand(load_sweep(sweep_file(tmp_path, grid), [], [], None))


def test_unknown_sweep_keys_and_a_missing_grid_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="unknown sweep key"):
        load_sweep(sweep_file(tmp_path, {"budget.episodes": [64]}, repeat=2), [], [], None)
    with pytest.raises(ScenarioError, match="no grid"):
        load_sweep(TINY, [], [], None)
    with pytest.raises(ScenarioError, match="--seeds"):
        load_sweep(TINY, ["arms.0.args.window=8,16"], [], "0,x")


def run_sweep(args, tmp_path, cache):
    env = {
        "TESTBED_CACHE": str(cache),
        "PATH": "/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    return subprocess.run(
        [sys.executable, "-m", "testbed.sweep", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_tiny_sweep_runs_each_distinct_arm_once_and_reports_the_grid(tmp_path, shared_cache):
    path = sweep_file(tmp_path, {"arms.running_mean.args.window": [16, 32]})
    proc = run_sweep([str(path), "--out", str(tmp_path / "out"), "--name", "s"], tmp_path, shared_cache)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    root = tmp_path / "out" / "s"
    index = json.loads((root / "sweep.json").read_text())
    assert index["points"][1]["arms"] == {"running_mean": "p01", "grpo": "p00"}
    p01 = json.loads((root / "runs" / "p01" / "manifest.json").read_text())
    assert set(p01["arms"]) == {"running_mean"}  # GRPO was not run again
    assert (root / "points" / "p01.yaml").exists()

    grid = pd.read_csv(root / "report" / "grid.csv")
    assert len(grid) == 2 * 2 * 2  # points x arms x switches
    assert set(grid["arms.running_mean.args.window"]) == {16, 32}
    grpo = grid[grid["arm"] == "grpo"].sort_values(["switch", "point"])
    assert grpo.groupby("switch")["horizon_reward"].nunique().eq(1).all()  # the same rows at both points
    rm = grid[grid["arm"] == "running_mean"]
    # the window reached the arm: its rows differ between the points (at some switch, or overall)
    assert rm.groupby("switch")["horizon_reward"].nunique().eq(2).any() or rm["mean_reward"].nunique() == 2
    assert (root / "report" / "figures" / "grid_recovery.png").stat().st_size > 5_000
    assert "### Switch 1" in (root / "report" / "grid.md").read_text()

    again = run_sweep(["--resume", str(root)], tmp_path, shared_cache)  # nothing left to run
    assert again.returncode == 0, again.stderr[-3000:]
    assert "run directory" not in again.stdout + again.stderr
    assert run_sweep([str(path), "--out", str(tmp_path / "out"), "--name", "s"], tmp_path, shared_cache).returncode == 2

    # a later sweep takes the finished arms with the same settings from this one (--reuse)
    (tmp_path / "b").mkdir()
    later = sweep_file(tmp_path / "b", {"arms.running_mean.args.window": [32, 48]})
    proc = run_sweep(
        [str(later), "--out", str(tmp_path / "out"), "--name", "b", "--reuse", str(root)], tmp_path, shared_cache
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = json.loads((tmp_path / "out" / "b" / "sweep.json").read_text())
    earlier = {label: str((root / "runs" / label).resolve()) for label in ("p00", "p01")}
    assert index["points"][0]["arms"] == {"running_mean": earlier["p01"], "grpo": earlier["p00"]}  # nothing rerun
    assert index["points"][1]["arms"] == {"running_mean": "p01", "grpo": earlier["p00"]}
    assert not (tmp_path / "out" / "b" / "runs" / "p00").exists()
    b = pd.read_csv(tmp_path / "out" / "b" / "report" / "grid.csv")
    cols = ["arm", "switch", "horizon_reward", "final_reward"]
    mine = b[b["point"] == "p00"].sort_values(cols[:2])[cols].reset_index(drop=True)
    theirs = grid[grid["point"] == "p01"].sort_values(cols[:2])[cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, theirs)
