"""The trackers mirror the run's own tables, read back through each tracker's own reader: a tiny
run with TensorBoard, MLflow and W&B (offline) on must leave in each exactly the rows of
`updates.parquet` and `evals.parquet` (no point twice, none missing) and the rolling reward of
`episodes.parquet`. The same rows, appended by a process killed with SIGKILL once its trackers
are ahead of the durable rows and then resumed, must too. A tracker that dies costs no row. A
sweep is one MLflow parent with a child per point. (Parallel arms and the Ray runtime:
tests/test_ray_runtime.py.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from testbed.cli import run_command as run
from testbed.store import RunStore, read_table
from testbed.tracking.config import TrackingConfig
from testbed.tracking.points import Point, RowMirror
from testbed.tracking.run_info import RunInfo, public
from testbed.tracking.session import start_tracking
from testbed.tracking.sweep_parent import finish_sweep, link_points
from testbed.tracking.wandb_log import run_folders
from testbed.tracking.writer import TrackingWarning
from tests.test_end_to_end import ROOT
from tests.tracker_readers import (
    check,
    expected_evals,
    expected_updates,
    mlflow_scalars,
    tensorboard_scalars,
    wandb_scalars,
)
from tests.tracking_killed import append, cursor, rows_between, switches

ROLLING_EVERY = 16
BACKENDS = ["tensorboard", "mlflow", "wandb"]
BASE = [
    "tests/data/tiny.yaml",
    *("--set", "seeds=[0]", "--set", "budget.episodes=160", "--set", "eval.every=40", "--set", "eval.prompts=8"),
    *("--set", "output.flush_rows=16"),
    *("--set", "tracking.flush_seconds=0.2", "--set", f"tracking.rolling_every={ROLLING_EVERY}"),
    *("--track", "tensorboard,mlflow", "--track", "wandb", "--no-report"),
]
KEY = "running_mean-seed0"
CONFIG = {"backends": BACKENDS, "flush_seconds": 0.1, "rolling_every": ROLLING_EVERY}


@pytest.fixture(scope="module")
def cache(shared_cache):
    """The tests' TESTBED_CACHE (the SFT policy; MLflow's empty store), for this process and the
    tracking processes it starts."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    yield shared_cache
    monkeypatch.undo()


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, cache):
    """One tiny run with the three trackers on, through the CLI: what every read-back test shares."""
    out = tmp_path_factory.mktemp("tracked")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run.main([*BASE, "--out", str(out), "--run-name", "tracked"]) == 0
    assert not [w for w in caught if issubclass(w.category, TrackingWarning)], [str(w.message) for w in caught]
    return out / "tracked"


@pytest.fixture(scope="module")
def resumed_run(tracked_run, tmp_path_factory, cache):
    """The tracked run's rows again: appended by a process killed once its trackers hold the rows up
    to t=112 of which only those before t=64 were durable, then resumed here (the durable rows
    replayed, the rest appended again)."""
    target = tmp_path_factory.mktemp("resumed") / "run"
    command = [sys.executable, "-m", "tests.tracking_killed", str(tracked_run), str(target), json.dumps(CONFIG)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*command, "64", "112"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    said = proc.stdout.readline().strip()  # blocks until the trackers hold every row it appended
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert said == "ready", "the killed process's trackers never caught up"
    store = RunStore(target, flush_rows=10**6, flush_seconds=math.inf)
    manifest = {**store.read_manifest(), "resumes": [{"checkpoint": None}]}
    store.write_manifest(manifest)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = start_tracking(
            TrackingConfig(**CONFIG), store, {"name": "tiny"}, switches(tracked_run), lambda m: None
        )
        assert session is not None
        append(store, rows_between(tracked_run, 64, math.inf))
        store.flush()
        store.write_manifest({**manifest, "status": "done"})
        session.close()
    assert not [w for w in caught if issubclass(w.category, TrackingWarning)], [str(w.message) for w in caught]
    return target


def test_tensorboard_holds_the_tables_live_and_after_a_kill_and_resume(tracked_run, resumed_run):
    for run_dir in (tracked_run, resumed_run):
        check(tensorboard_scalars(run_dir / "tb" / KEY), run_dir, f"tensorboard {run_dir.name}", ROLLING_EVERY)


def mlflow_of(run_dir: Path) -> tuple[str, dict]:
    return f"sqlite:///{run_dir / 'mlflow' / 'mlflow.db'}", json.loads((run_dir / "tracking.json").read_text())[
        "mlflow"
    ]


def test_mlflow_holds_the_tables_live_and_after_a_kill_and_resume(tracked_run, resumed_run):
    from mlflow.tracking import MlflowClient

    for run_dir in (tracked_run, resumed_run):
        uri, state = mlflow_of(run_dir)
        run_id = state["runs"][KEY]["run_id"]
        tags = [*expected_updates(run_dir), *expected_evals(run_dir), "episodes/reward_rolling", "schedule/phase"]
        check(mlflow_scalars(uri, run_id, tags), run_dir, f"mlflow {run_dir.name}", ROLLING_EVERY)
        client = MlflowClient(tracking_uri=uri)
        child, parent = client.get_run(run_id), client.get_run(state["parent"]["run_id"])
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.info.status == "FINISHED"
    assert parent.data.params["name"] == "tiny"  # the resumed run's scenario, as it was given
    parent = MlflowClient(tracking_uri=mlflow_of(tracked_run)[0]).get_run(mlflow_of(tracked_run)[1]["parent"]["run_id"])
    assert parent.data.params["budget.episodes"] == "160" and "git_commit" in parent.data.params


def test_wandb_offline_holds_the_tables_live_and_after_a_kill_and_resume(tracked_run, resumed_run):
    for run_dir, processes in ((tracked_run, 1), (resumed_run, 2)):
        run_id = json.loads((run_dir / "tracking.json").read_text())["wandb"]["runs"][KEY]["id"]
        folders = run_folders(run_dir / "wandb", run_id)
        assert len(folders) == processes, folders  # a resumed run: the killed process's and its own, one id
        check(wandb_scalars(folders), run_dir, f"wandb {run_dir.name}", ROLLING_EVERY)


def test_mlflow_logs_no_step_twice_when_killed_between_a_write_and_the_cursor_save(tmp_path, cache):
    """A flush wrote six updates to MLflow's store; the process died before tracking.json said so
    (its cursor: the third). The resumed backend asks the store and logs each update once."""
    from mlflow.tracking import MlflowClient

    from testbed.tracking.mlflow_backend import MLflowBackend

    config = TrackingConfig(backends=["mlflow"])
    info = RunInfo(tmp_path, "x", "tiny", "x", {"name": "tiny"}, "", None, config)
    rows = [{"arm": "running_mean", "seed": 0, "update": u, "t": 16 * u, "policy_loss": 0.1 * u} for u in range(1, 11)]
    points = [p for p in RowMirror(config, []).points("updates", rows) if isinstance(p, Point) and p.stream == "update"]
    killed = MLflowBackend(info)
    parent = killed.start({})
    ids = killed.open(KEY, "running_mean", 0, {}, {})
    for point in points[:6]:
        killed.log(point)
    killed.flush()
    cursor_saved = (points[2].seq, points[2].step)
    resumed = MLflowBackend(info)
    resumed.start(parent)
    resumed.open(KEY, "running_mean", 0, ids, {"update": cursor_saved})
    for point in points:
        if not resumed.skip(point, cursor_saved):
            resumed.log(point)
    resumed.flush()
    history = MlflowClient(tracking_uri=resumed.uri).get_metric_history(ids["run_id"], "train/update")
    assert sorted(m.step for m in history) == [p.step for p in points]  # each once, none missing


def test_a_kill_before_the_ids_are_saved_resumes_the_same_tracker_runs(tmp_path, cache):
    """MLflow created the parent and the arm x seed run and stored four updates and an infinite
    rolling reward; the process died before tracking.json held any id. The resumed backends find the same
    runs (MLflow by their tags, W&B by ids that follow from the run directory) and MLflow logs each
    update once, the infinite one included."""
    from mlflow.tracking import MlflowClient

    from testbed.tracking.mlflow_backend import MLflowBackend
    from testbed.tracking.wandb_backend import WandbBackend

    config = TrackingConfig(backends=["mlflow"])
    info = RunInfo(tmp_path, "x", "tiny", "x", {"name": "tiny"}, "", None, config)
    rows = [{"arm": "running_mean", "seed": 0, "update": u, "t": 16 * u, "policy_loss": 0.1 * u} for u in range(1, 7)]
    points = [p for p in RowMirror(config, []).points("updates", rows) if isinstance(p, Point) and p.stream == "update"]
    # a value the store gives back changed: an infinity comes back as the largest float
    points.append(Point(KEY, "rolling", 7, 100, {"episodes/reward_rolling": math.inf}))
    killed = MLflowBackend(info)
    parent = killed.start({})
    ids = killed.open(KEY, "running_mean", 0, {}, {})
    for point in [*points[:4], points[-1]]:
        killed.log(point)
    killed.flush()
    resumed = MLflowBackend(info)
    assert resumed.start({}) == parent  # nothing saved: found by the run directory's path
    assert resumed.open(KEY, "running_mean", 0, {}, {}) == ids
    for point in points:
        if not resumed.skip(point, (-1, -1)):
            resumed.log(point)
    resumed.flush()
    client = MlflowClient(tracking_uri=resumed.uri)
    history = client.get_metric_history(ids["run_id"], "train/update")
    assert sorted(m.step for m in history) == [p.step for p in points[:-1]]  # each once
    assert len(client.get_metric_history(ids["run_id"], "episodes/reward_rolling")) == 1  # the infinity too
    experiment = client.get_run(parent["run_id"]).info.experiment_id
    assert len(client.search_runs([experiment])) == 2  # no orphan parent or child
    other = RunInfo(tmp_path / "other", "x", "tiny", "x", {"name": "tiny"}, "", None, config)
    wandb_ids = [WandbBackend(run_info) for run_info in (info, info, other)]
    assert wandb_ids[0].run_id(KEY) == wandb_ids[1].run_id(KEY) != wandb_ids[2].run_id(KEY)
    assert wandb_ids[0].run_id(KEY) != wandb_ids[0].run_id("scenario")


def test_a_tracker_that_dies_mid_run_costs_no_row_and_warns_once(tracked_run, tmp_path, cache):
    """The rows of the run above, appended again through a fresh store with TensorBoard and MLflow on;
    halfway, MLflow's store is taken away. Every row reaches the tables, MLflow warns once, and
    TensorBoard still gets every update."""
    tables = {name: read_table(tracked_run, name).to_dict("records") for name in ("episodes", "evals", "updates")}
    store = RunStore(tmp_path / "run")
    config = TrackingConfig(backends=["tensorboard", "mlflow"], flush_seconds=0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = start_tracking(config, store, {"name": "tiny"}, [(64, "cute", "chuunibyou")], log=lambda m: None)
        assert session is not None
        half = len(tables["updates"]) // 2
        for name, rows in tables.items():
            store.append(name, rows if name != "updates" else rows[:half])
        deadline = time.monotonic() + 120
        while cursor(store.root, "mlflow", KEY) < half and time.monotonic() < deadline:  # MLflow has the first half
            time.sleep(0.05)
        assert cursor(store.root, "mlflow", KEY) >= half, "MLflow never logged the first half"
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


def test_a_sweep_is_one_mlflow_parent_with_a_child_per_point(tmp_path, cache):
    """The sweep's run, made once (a resumed sweep keeps it); a point's run (the backend the point's
    tracking process runs, here in this process) nests under it and its arm x seed run under the
    point's, with the point's rows; the sweep's run ends FINISHED."""
    from mlflow.tracking import MlflowClient

    from testbed.tracking.mlflow_backend import MLflowBackend

    root = tmp_path / "sweep"
    root.mkdir()
    links = link_points(root, {"backends": ["mlflow"]})
    assert link_points(root, {"backends": ["mlflow"]}) == links  # kept in SWEEP/tracking.json
    config = TrackingConfig(backends=["mlflow"], **links)
    store = RunStore(root / "runs" / "p00")
    updates = [{"arm": "rm", "seed": 0, "update": u, "t": 16 * u, "policy_loss": 1 / u} for u in range(1, 6)]
    store.append("updates", updates)
    store.flush()
    info = RunInfo(store.root, "p00", links["experiment"], links["group"], {"name": "p00"}, "", None, config)
    backend = MLflowBackend(info)
    point = backend.start({})["run_id"]
    child = backend.open("rm-seed0", "rm", 0, {}, {})["run_id"]
    for item in RowMirror(config, []).points("updates", updates):
        if isinstance(item, Point):
            backend.log(item)
    backend.finish(store.root)
    finish_sweep(root, {"backends": ["mlflow"]}, done=True)

    client = MlflowClient(tracking_uri=links["mlflow_uri"])
    assert client.get_run(point).data.tags["mlflow.parentRunId"] == links["parent_run"]
    assert client.get_run(child).data.tags["mlflow.parentRunId"] == point
    assert client.get_run(links["parent_run"]).info.status == "FINISHED"
    want = expected_updates(store.root)
    got = mlflow_scalars(links["mlflow_uri"], child, list(want))
    assert {tag: sorted(points) for tag, points in got.items()} == {tag: sorted(p) for tag, p in want.items()}
