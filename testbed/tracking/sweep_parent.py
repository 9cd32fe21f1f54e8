"""A sweep's trackers: one parent, a child per grid point (each point's scenario run, itself the
parent of its arm x seed runs). The sweep fills each point's `tracking` section: the W&B group and
MLflow experiment are the sweep's name, MLflow's store is SWEEP/mlflow/ (one store for the grid)
and the point's MLflow run nests under the sweep's own run, made here once (kept in
SWEEP/tracking.json so a resumed sweep keeps it). A tracker that fails here only warns."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from testbed.tracking.writer import TrackingWarning

FILE = "tracking.json"


def link_points(root: Path, tracking: dict[str, Any]) -> dict[str, Any]:
    """The settings every point's `tracking` section gets (nothing when no backend is on)."""
    backends = tracking.get("backends") or []
    if not backends:
        return {}
    links: dict[str, Any] = {"group": root.name, "experiment": tracking.get("experiment") or root.name}
    if "mlflow" in backends:
        links["mlflow_uri"] = tracking.get("mlflow_uri") or f"sqlite:///{(root / 'mlflow').resolve() / 'mlflow.db'}"
        try:
            links["parent_run"] = sweep_run(
                root, links["mlflow_uri"], links["experiment"], local=not tracking.get("mlflow_uri")
            )
        except Exception as exc:  # the points still log, each as its own parent
            warnings.warn(f"tracking: mlflow failed to make the sweep's run ({exc})", TrackingWarning, stacklevel=2)
    return links


def sweep_run(root: Path, uri: str, experiment: str, local: bool) -> str:
    from mlflow.tracking import MlflowClient

    from testbed.tracking.mlflow_backend import built_whole

    state_path = root / FILE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    if "mlflow_run" in state:
        return str(state["mlflow_run"])
    if local:
        (root / "mlflow").mkdir(exist_ok=True)
        built_whole((root / "mlflow").resolve() / "mlflow.db", MlflowClient)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    artifacts = (root / "mlflow" / "artifacts").resolve().as_uri() if local else None
    experiment_id = found.experiment_id if found else client.create_experiment(experiment, artifact_location=artifacts)
    run_id = client.create_run(experiment_id, run_name=root.name, tags={"testbed.sweep": root.name}).info.run_id
    state_path.write_text(json.dumps({**state, "mlflow_run": run_id}))
    return run_id


def finish_sweep(root: Path, tracking: dict[str, Any], done: bool) -> None:
    """Mark the sweep's MLflow run finished (or failed) once its points have run."""
    state_path = root / FILE
    if not state_path.exists() or "mlflow" not in (tracking.get("backends") or []):
        return
    try:
        from mlflow.tracking import MlflowClient

        uri = tracking.get("mlflow_uri") or f"sqlite:///{(root / 'mlflow').resolve() / 'mlflow.db'}"
        MlflowClient(tracking_uri=uri).set_terminated(
            json.loads(state_path.read_text())["mlflow_run"], status="FINISHED" if done else "FAILED"
        )
    except Exception as exc:
        warnings.warn(f"tracking: mlflow failed to close the sweep's run ({exc})", TrackingWarning, stacklevel=2)
