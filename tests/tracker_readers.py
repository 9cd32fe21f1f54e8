"""Read back what each tracker holds, through the tracker's own reader, as {tag: [(t, value), ...]}:
TensorBoard's EventAccumulator, MLflow's client, and for W&B (whose 0.31 SDK has no Python reader
of its files) testbed/tracking/wandb_log.py, which decodes them with wandb's own protobuf Record;
and what each should hold, from the run's own tables (one arm x seed's rows)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.store import read_table
from testbed.tracking.wandb_log import history

Curves = dict[str, list[tuple[int, float]]]


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


def rows(run_dir: Path, table: str, key: tuple[str, int] | None) -> pd.DataFrame:
    frame = read_table(run_dir, table)
    if key is None:
        return frame
    return frame[(frame["arm"] == key[0]) & (frame["seed"] == key[1])]


def expected_updates(run_dir: Path, key: tuple[str, int] | None = None) -> Curves:
    updates = rows(run_dir, "updates", key).sort_values("update")
    assert updates["update"].tolist() == list(range(1, len(updates) + 1))
    columns = [c for c in updates.select_dtypes("number").columns if c not in ("seed", "t")]
    return {
        f"train/{c}": [(int(t), float(v)) for t, v in zip(updates["t"], updates[c], strict=True) if v == v]
        for c in columns
    }


def expected_evals(run_dir: Path, key: tuple[str, int] | None = None) -> Curves:
    evals = rows(run_dir, "evals", key).sort_values(["t", "style"])
    out = {
        f"eval/share/{s}": [(int(t), float(v)) for t, v in zip(g["t"], g["share"], strict=True)]
        for s, g in evals.groupby("style")
    }
    per_eval = evals.groupby("t", sort=True)["eval_reward"].first()
    out["eval/reward"] = [(int(t), float(v)) for t, v in per_eval.items()]
    return out


def expected_rolling(run_dir: Path, every: int, key: tuple[str, int] | None = None, window: int = 128):
    episodes = rows(run_dir, "episodes", key)
    judged = episodes[episodes["reward"].notna()]  # in the order they were written, as the trackers saw them
    rewards, ts = judged["reward"].tolist(), judged["t"].tolist()
    return [
        (int(ts[n - 1]), float(np.mean(rewards[max(0, n - window) : n]))) for n in range(every, len(rewards) + 1, every)
    ]


def same(got: list[tuple[int, float]], want: list[tuple[int, float]], tag: str) -> None:
    got, want = sorted(got), sorted(want)
    assert [s for s, _ in got] == [s for s, _ in want], f"{tag}: steps differ (duplicated or missing points)"
    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, atol=1e-7, err_msg=tag)


def check(logged: Curves, run_dir: Path, backend: str, every: int, key: tuple[str, int] | None = None) -> None:
    """`logged` holds exactly the arm x seed's (default: the run's only) updates, evaluations,
    rolling reward and schedule steps."""
    want = {
        **expected_updates(run_dir, key),
        **expected_evals(run_dir, key),
        "episodes/reward_rolling": expected_rolling(run_dir, every, key),
    }
    assert len(want) > 20 and "train/reward_mean" in want and "eval/share/cute" in want
    for tag, points in want.items():
        same(logged.get(tag, []), points, f"{backend} {tag}")
    switches = json.loads((run_dir / "manifest.json").read_text())["switch_points"]
    marks = [(0, 0.0)] + [p for k, t in enumerate(switches, 1) for p in ((t - 1, k - 1.0), (t, float(k)))]
    assert sorted(logged["schedule/phase"]) == marks  # the target's phase steps up at each switch
