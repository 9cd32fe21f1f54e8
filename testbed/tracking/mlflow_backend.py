"""MLflow: a parent run for the scenario run (its parameters: the resolved scenario and the commit;
at the end the report's files as artifacts and the headline figures), a nested run per arm x seed.

The store is `tracking.mlflow_uri`, or a SQLite database in RUN/mlflow/ with the artifacts beside
it. Metrics are batched in memory and sent at each flush (one `log_batch` per run and up to 1000
metrics), so a remote server is called every `flush_seconds`, not every update.

A point is never split between two `log_batch` calls, and each call is one transaction of the
store: a point is in MLflow whole or not at all. So a resumed run asks MLflow itself which of the
points after the saved cursor it holds (a kill between a batch's write and the cursor's save left
them there) and logs only the rest: no step twice. A kill between a run's creation and the save of
its id in tracking.json is covered the same way: each run is tagged with the run directory's path
and its arm x seed, and a resumed run looks for them before it creates new ones."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from testbed.paths import cache_dir
from testbed.tracking.points import STREAMS, Point
from testbed.tracking.run_info import RunInfo, headline, report_files

BATCH = 1000  # MLflow's limit on metrics per log_batch
PARAMS_BATCH = 100  # ... and on parameters
RUN_PATH, KEY = "testbed.run_path", "testbed.key"  # tags that find a run whose id a kill left unsaved


def stored(value: float) -> float:
    """A metric as MLflow's store gives it back: an infinity is kept as the largest float."""
    return math.copysign(1.7976931348623157e308, value) if math.isinf(value) else value


def built_whole(db: Path, client: Any) -> None:
    """MLflow builds a new store's schema with dozens of migrations (2-3 s of CPU); a process killed
    in the middle leaves a database no later start can upgrade. So the schema is built under a
    temporary name and the file renamed once complete (a half-built one from a killed start is
    simply built again). The empty store is kept in the testbed's cache, one per MLflow version, and
    copied from there the next time: a run's store then costs a file copy."""
    if db.exists():
        return
    import mlflow

    template = cache_dir() / f"mlflow-empty-{mlflow.__version__}.db"
    partial = db.with_name(f"{db.name}.building-{os.getpid()}")
    partial.unlink(missing_ok=True)
    if template.is_file():
        shutil.copyfile(template, partial)
    else:
        for name in ("mlflow", "alembic"):  # their INFO lines about building the schema would clutter the run's output
            logging.getLogger(name).setLevel(logging.WARNING)
        client(tracking_uri=f"sqlite:///{partial}").search_experiments()  # the first call builds the schema
        with contextlib.suppress(OSError):  # no cache (read-only home): built again next time
            template.parent.mkdir(parents=True, exist_ok=True)
            spare = template.with_name(f"{template.name}.{os.getpid()}")
            shutil.copyfile(partial, spare)
            os.replace(spare, template)
    os.replace(partial, db)


class MLflowBackend:
    name = "mlflow"

    def __init__(self, info: RunInfo):
        from mlflow.tracking import MlflowClient

        self.info = info
        local = info.run_dir / "mlflow"
        if info.config.mlflow_uri is None:
            local.mkdir(exist_ok=True)
            built_whole(local.resolve() / "mlflow.db", MlflowClient)
        self.uri = info.config.mlflow_uri or f"sqlite:///{local.resolve() / 'mlflow.db'}"
        self.artifacts = None if info.config.mlflow_uri else (local / "artifacts").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        self.runs: dict[str, str] = {}  # key -> run id
        self.pending: dict[str, list[Point]] = {}
        # a resumed run's streams still to check against the store: (key, stream), until the first
        # point it does not hold (points reach the store in order, so none after it is there)
        self.unsure: set[tuple[str, str]] = set()
        self.histories: dict[tuple[str, str], set[tuple[int, float]]] = {}

    def start(self, saved: dict[str, Any]) -> dict[str, Any]:
        from mlflow.entities import Param

        if saved:
            self.parent = saved["run_id"]
            self.client.update_run(self.parent, status="RUNNING")
            return saved
        experiment = self.client.get_experiment_by_name(self.info.experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment
            else self.client.create_experiment(self.info.experiment, artifact_location=self.artifacts)
        )
        path = str(self.info.run_dir.resolve())
        commit = str(self.info.git_commit)
        tags = {"testbed.run_dir": self.info.name, RUN_PATH: path, "mlflow.source.git.commit": commit}
        if self.info.config.parent_run:
            tags["mlflow.parentRunId"] = self.info.config.parent_run
        found = self.find(experiment_id, {RUN_PATH: path})
        self.parent = found or self.client.create_run(experiment_id, run_name=self.info.name, tags=tags).info.run_id
        if found:
            self.client.update_run(found, status="RUNNING")
        params = [Param(k, v) for k, v in self.info.params().items()]
        for i in range(0, len(params), PARAMS_BATCH):
            self.client.log_batch(self.parent, params=params[i : i + PARAMS_BATCH])
        return {"run_id": self.parent, "experiment_id": experiment_id}

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        if saved:
            self.runs[key] = saved["run_id"]
            self.client.update_run(saved["run_id"], status="RUNNING")
            self.unsure.update((key, stream) for stream in STREAMS)
            return saved
        experiment_id = self.client.get_run(self.parent).info.experiment_id
        tags = {"mlflow.parentRunId": self.parent, KEY: key, "arm": arm, "seed": str(seed)}
        tags.update({f"switch{k}": f"t={t}: {a} -> {b}" for k, (t, a, b) in enumerate(self.info.switches, start=1)})
        found = self.find(experiment_id, {"mlflow.parentRunId": self.parent, KEY: key})
        if found:  # created by a process killed before it saved the id: it may hold points already
            self.client.update_run(found, status="RUNNING")
            self.unsure.update((key, stream) for stream in STREAMS)
        self.runs[key] = found or self.client.create_run(experiment_id, run_name=key, tags=tags).info.run_id
        return {"run_id": self.runs[key]}

    def find(self, experiment_id: str, tags: dict[str, str]) -> str | None:
        """The id of the run with these tags, if one exists (a kill came before its id was saved)."""
        if any("'" in value for value in tags.values()):
            return None  # not expressible in MLflow's filter; such a run is created anew
        query = " and ".join(f"tags.`{name}` = '{value}'" for name, value in tags.items())
        runs = self.client.search_runs([experiment_id], query, max_results=1)
        return runs[0].info.run_id if runs else None

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        if point.seq <= cursor[0]:
            return True
        if (point.key, point.stream) not in self.unsure:
            return False
        if self.holds(point):
            return True
        self.unsure.discard((point.key, point.stream))
        return False

    def holds(self, point: Point) -> bool:
        """Whether the store has `point` (whole, see above): one of its scalars at its step. The
        update number (`train/update`) when there is one, since it differs from point to point."""
        if not point.scalars:
            return False
        tag = "train/update" if "train/update" in point.scalars else next(iter(point.scalars))
        if (point.key, tag) not in self.histories:
            history = self.client.get_metric_history(self.runs[point.key], tag)
            self.histories[(point.key, tag)] = {(m.step, m.value) for m in history}
        return (point.step, stored(point.scalars[tag])) in self.histories[(point.key, tag)]

    def log(self, point: Point) -> None:
        self.pending.setdefault(point.key, []).append(point)

    def flush(self) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, points in list(self.pending.items()):
            batch: list[Any] = []
            for point in points:  # whole points per call: each call is one transaction
                metrics = [Metric(tag, value, now, point.step) for tag, value in point.scalars.items()]
                if batch and len(batch) + len(metrics) > BATCH:
                    self.client.log_batch(self.runs[key], metrics=batch)
                    batch = []
                batch += metrics
            if batch:
                self.client.log_batch(self.runs[key], metrics=batch)
            del self.pending[key]

    def finish(self, run_dir: Path | None) -> None:
        if run_dir is not None:
            for path in report_files(run_dir):
                self.client.log_artifact(self.parent, str(path), "report" if path.suffix == ".md" else "figures")
            for key, figures in headline(run_dir).items():
                for tag, (step, value) in figures.items():
                    if key in self.runs:
                        self.log(Point(key, "report", 0, step, {tag: value}))
            self.flush()
        status = "FINISHED" if run_dir is not None else "KILLED"
        for run_id in [*self.runs.values(), self.parent]:
            self.client.set_terminated(run_id, status=status)
