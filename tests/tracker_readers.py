"""Read back what each tracker holds, through the tracker's own reader, as {tag: [(t, value), ...]}:
TensorBoard's EventAccumulator, MLflow's client, and for W&B (whose 0.31 SDK has no Python reader
of its files) testbed/tracking/wandb_log.py, which decodes them with wandb's own protobuf Record."""

from __future__ import annotations

from pathlib import Path

from testbed.tracking.wandb_log import history


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def mlflow_scalars(uri: str, run_id: str, tags: list[str]) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return {tag: [(m.step, m.value) for m in client.get_metric_history(run_id, tag)] for tag in tags}


def wandb_scalars(folders: list[Path]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in history(folders):
        for tag, value in row.items():
            if tag != "t" and not tag.startswith("_") and isinstance(value, int | float):
                out.setdefault(tag, []).append((int(row["t"]), float(value)))
    return out
