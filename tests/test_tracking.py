"""The trackers mirror the run's own tables: a tiny run with TensorBoard, MLflow and W&B (offline)
on, killed with SIGKILL mid-run and resumed, must leave in each tracker exactly the rows of
`updates.parquet` and `evals.parquet` (no point twice, none missing) and the rolling reward of
`episodes.parquet`, read back through each tracker's own reader. A tracker that dies costs no row."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from testbed.cli import run
from testbed.store import RunStore, read_table
from testbed.tracking.config import TrackingConfig
from testbed.tracking.run_info import RunInfo, public
from testbed.tracking.session import start_tracking
from testbed.tracking.wandb_log import run_folders
from testbed.tracking.writer import TrackingWarning
from tests.test_end_to_end import ROOT
from tests.tracker_readers import mlflow_scalars, tensorboard_scalars, wandb_scalars

ROLLING_EVERY = 16
BASE = [
    "tests/data/tiny.yaml",
    *("--set", "seeds=[0]", "--set", "budget.episodes=160", "--set", "eval.every=40", "--set", "eval.prompts=8"),
    *("--set", "reliability.checkpoint_every=2", "--set", "output.flush_rows=16"),
    *("--set", "tracking.flush_seconds=0.2", "--set", f"tracking.rolling_every={ROLLING_EVERY}"),
    *("--track", "tensorboard,mlflow", "--track", "wandb", "--no-report"),
]
KEY = "running_mean-seed0"


def cursor(run_dir: Path, backend: str) -> int:
    try:
        state = json.loads((run_dir / "tracking.json").read_text())
        return state[backend]["cursor"][KEY]["update"][0]
    except (OSError, ValueError, KeyError):
        return -1


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory, shared_cache):
    """The run, killed once the trackers hold a few updates and a checkpoint is down, then resumed."""
    tmp = tmp_path_factory.mktemp("tracked")
    run_dir = tmp / "runs" / "tracked"
    env = {"TESTBED_CACHE": str(shared_cache), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.run", *BASE, "--out", str(tmp / "runs"), "--run-name", "tracked"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        # MLflow's first start (its SQLite schema) takes longer than this tiny run: it catches up on resume
        if cursor(run_dir, "tensorboard") >= 2 and cursor(run_dir, "wandb") >= 1:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
        try:
            assert run.main(["--resume", str(run_dir), "--no-report"]) == 0
        finally:
            monkeypatch.undo()
    assert not [w for w in caught if issubclass(w.category, TrackingWarning)], [str(w.message) for w in caught]
    return run_dir


def expected_updates(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    updates = read_table(run_dir, "updates").sort_values("update")
    assert updates["update"].tolist() == list(range(1, len(updates) + 1))
    columns = [c for c in updates.select_dtypes("number").columns if c not in ("seed", "t")]
    return {
        f"train/{c}": [(int(t), float(v)) for t, v in zip(updates["t"], updates[c], strict=True) if v == v]
        for c in columns
    }


def expected_evals(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    evals = read_table(run_dir, "evals").sort_values(["t", "style"])
    out = {
        f"eval/share/{s}": [(int(t), float(v)) for t, v in zip(g["t"], g["share"], strict=True)]
        for s, g in evals.groupby("style")
    }
    per_eval = evals.groupby("t", sort=True)["eval_reward"].first()
    out["eval/reward"] = [(int(t), float(v)) for t, v in per_eval.items()]
    return out


def expected_rolling(run_dir: Path, window: int = 128) -> list[tuple[int, float]]:
    episodes = read_table(run_dir, "episodes")
    judged = episodes[episodes["reward"].notna()]  # in the order they were written, as the trackers saw them
    rewards, ts = judged["reward"].tolist(), judged["t"].tolist()
    return [
        (int(ts[n - 1]), float(np.mean(rewards[max(0, n - window) : n])))
        for n in range(ROLLING_EVERY, len(rewards) + 1, ROLLING_EVERY)
    ]


def same(got: list[tuple[int, float]], want: list[tuple[int, float]], tag: str) -> None:
    got, want = sorted(got), sorted(want)
    assert [s for s, _ in got] == [s for s, _ in want], f"{tag}: steps differ (duplicated or missing points)"
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, atol=1e-7, err_msg=tag)


def check(logged: dict[str, list[tuple[int, float]]], run_dir: Path, backend: str) -> None:
    want = {
        **expected_updates(run_dir),
        **expected_evals(run_dir),
        "episodes/reward_rolling": expected_rolling(run_dir),
    }
    assert len(want) > 20 and "train/reward_mean" in want and "eval/share/cute" in want
    for tag, points in want.items():
        same(logged.get(tag, []), points, f"{backend} {tag}")
    switches = json.loads((run_dir / "manifest.json").read_text())["switch_points"]
    marks = [(0, 0.0)] + [p for k, t in enumerate(switches, 1) for p in ((t - 1, k - 1.0), (t, float(k)))]
    assert sorted(logged["schedule/phase"]) == marks  # the target's phase steps up at each switch


def test_tensorboard_holds_the_tables_after_a_kill_and_resume(resumed_run):
    check(tensorboard_scalars(resumed_run / "tb" / KEY), resumed_run, "tensorboard")


def test_mlflow_holds_the_tables_after_a_kill_and_resume(resumed_run):
    state = json.loads((resumed_run / "tracking.json").read_text())["mlflow"]
    uri = f"sqlite:///{resumed_run / 'mlflow' / 'mlflow.db'}"
    run_id = state["runs"][KEY]["run_id"]
    tags = [*expected_updates(resumed_run), *expected_evals(resumed_run), "episodes/reward_rolling", "schedule/phase"]
    check(mlflow_scalars(uri, run_id, tags), resumed_run, "mlflow")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    child, parent = client.get_run(run_id), client.get_run(state["parent"]["run_id"])
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.info.status == "FINISHED"
    assert parent.data.params["budget.episodes"] == "160" and "git_commit" in parent.data.params


def test_wandb_offline_holds_the_tables_after_a_kill_and_resume(resumed_run):
    run_id = json.loads((resumed_run / "tracking.json").read_text())["wandb"]["runs"][KEY]["id"]
    folders = run_folders(resumed_run / "wandb", run_id)
    assert len(folders) == 2, folders  # the killed process's and the resumed one's, one run id
    check(wandb_scalars(folders), resumed_run, "wandb")


def test_a_tracker_that_dies_mid_run_costs_no_row_and_warns_once(resumed_run, tmp_path):
    """The rows of the run above, appended again through a fresh store with TensorBoard and MLflow on;
    halfway, MLflow's store is taken away. Every row reaches the tables, MLflow warns once, and
    TensorBoard still gets every update."""
    tables = {name: read_table(resumed_run, name).to_dict("records") for name in ("episodes", "evals", "updates")}
    store = RunStore(tmp_path / "run")
    (store.root / "mlflow").mkdir()  # a copy of the run's store: its schema is built already (seconds saved)
    shutil.copy(resumed_run / "mlflow" / "mlflow.db", store.root / "mlflow" / "mlflow.db")
    uri = f"sqlite:///{store.root / 'mlflow' / 'mlflow.db'}"
    config = TrackingConfig(backends=["tensorboard", "mlflow"], flush_seconds=0.05, mlflow_uri=uri)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = start_tracking(config, store, {"name": "tiny"}, [(64, "cute", "chuunibyou")], log=lambda m: None)
        assert session is not None
        half = len(tables["updates"]) // 2
        for name, rows in tables.items():
            store.append(name, rows if name != "updates" else rows[:half])
        deadline = time.monotonic() + 120
        while cursor(store.root, "mlflow") < half and time.monotonic() < deadline:  # MLflow has the first half
            time.sleep(0.05)
        assert cursor(store.root, "mlflow") >= half, "MLflow never logged the first half"
        shutil.rmtree(store.root / "mlflow")  # its store is gone (a disk unmounted): every write fails
        for row in tables["updates"][half:]:
            store.append("updates", [row])
        store.flush()
        session.close()
    for name, rows in tables.items():
        assert len(read_table(store.root, name)) == len(rows), f"{name}: rows lost"
    said = [str(w.message) for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(said) == 1 and said[0].startswith("tracking: mlflow failed to"), said
    logged = tensorboard_scalars(store.root / "tb" / KEY)
    assert len(logged["train/reward_mean"]) == len(tables["updates"]), "TensorBoard lost points"
    assert json.loads((store.root / "tracking.json").read_text())["failures"] == said


def test_a_missing_tracker_library_or_a_misspelt_one_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    assert run.main(["tests/data/tiny.yaml", "--out", str(tmp_path), "--track", "wandb"]) == 2
    said = capsys.readouterr().err
    assert "pip install 'testbed[track]'" in said and "missing: wandb" in said, said
    assert run.main(["tests/data/tiny.yaml", "--out", str(tmp_path), "--track", "tensorbord"]) == 2
    said = capsys.readouterr().err
    assert "tracking.backends" in said and "tensorbord" in said, said
    assert list(tmp_path.iterdir()) == []


def test_no_secret_of_the_scenario_reaches_a_tracker(tmp_path):
    scenario = {
        "name": "x",
        "judge": {"args": {"api_key": "sk-123", "api_key_env": "ZAI_API_KEY", "api_base": "http://u:pw@h/v1"}},
    }
    info = RunInfo(tmp_path, "x", "x", "x", public(scenario), "", None, TrackingConfig())
    params = info.params()
    assert params["judge.args.api_key"] == "<hidden>" and params["judge.args.api_key_env"] == "ZAI_API_KEY"
    assert "pw" not in params["judge.args.api_base"] and "sk-123" not in json.dumps(params)
