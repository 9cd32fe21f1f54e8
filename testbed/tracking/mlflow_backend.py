"""MLflow: a parent run for the scenario run (its parameters: the resolved scenario and the commit;
at the end the report's files as artifacts and the headline figures), a nested run per arm x seed.

The store is `tracking.mlflow_uri`, or a SQLite database in RUN/mlflow/ with the artifacts beside
it. Metrics are batched in memory and sent at each flush (one `log_batch` per run), so a remote
server is called every `flush_seconds`, not every update."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from testbed.tracking.points import Point
from testbed.tracking.run_info import RunInfo, headline, report_files

BATCH = 1000  # MLflow's limit on metrics per log_batch
PARAMS_BATCH = 100  # ... and on parameters


def built_whole(db: Path, client: Any) -> None:
    """MLflow builds a new store's schema with dozens of migrations; a process killed in the middle
    leaves a database no later start can upgrade. So the schema is built under a temporary name and
    the file renamed once complete (a half-built one from a killed start is simply built again)."""
    if db.exists():
        return
    for name in ("mlflow", "alembic"):  # their INFO lines about building the schema would clutter the run's output
        logging.getLogger(name).setLevel(logging.WARNING)
    partial = db.with_name(f"{db.name}.building-{os.getpid()}")
    partial.unlink(missing_ok=True)
    client(tracking_uri=f"sqlite:///{partial}").search_experiments()  # the first call builds the schema
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
        self.pending: dict[str, list[Any]] = {}

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
        tags = {"testbed.run_dir": self.info.name, "mlflow.source.git.commit": str(self.info.git_commit)}
        if self.info.config.parent_run:
            tags["mlflow.parentRunId"] = self.info.config.parent_run
        self.parent = self.client.create_run(experiment_id, run_name=self.info.name, tags=tags).info.run_id
        params = [Param(k, v) for k, v in self.info.params().items()]
        for i in range(0, len(params), PARAMS_BATCH):
            self.client.log_batch(self.parent, params=params[i : i + PARAMS_BATCH])
        return {"run_id": self.parent, "experiment_id": experiment_id}

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        if saved:
            self.runs[key] = saved["run_id"]
            self.client.update_run(saved["run_id"], status="RUNNING")
            return saved
        experiment_id = self.client.get_run(self.parent).info.experiment_id
        tags = {"mlflow.parentRunId": self.parent, "arm": arm, "seed": str(seed)}
        tags.update({f"switch{k}": f"t={t}: {a} -> {b}" for k, (t, a, b) in enumerate(self.info.switches, start=1)})
        self.runs[key] = self.client.create_run(experiment_id, run_name=key, tags=tags).info.run_id
        return {"run_id": self.runs[key]}

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        return point.seq <= cursor[0]

    def log(self, point: Point) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.pending.setdefault(point.key, []).extend(
            Metric(tag, value, now, point.step) for tag, value in point.scalars.items()
        )

    def flush(self) -> None:
        for key, metrics in list(self.pending.items()):
            for i in range(0, len(metrics), BATCH):
                self.client.log_batch(self.runs[key], metrics=metrics[i : i + BATCH])
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
