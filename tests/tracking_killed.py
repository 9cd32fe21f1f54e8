"""A tracked run's rows, appended as a run appends them, in a process that tests/test_tracking.py
kills with SIGKILL: `python -m tests.tracking_killed SOURCE TARGET CONFIG_JSON DURABLE_T HELD_T`.

The rows of the finished run SOURCE with t < DURABLE_T are appended to the run directory TARGET and
flushed (durable, as at a checkpoint); those with DURABLE_T <= t < HELD_T are appended but never
flushed (lost with the process, as rows past a checkpoint are). Once every tracker holds them all,
(W&B: in its files) it prints `ready` and waits to be killed: the trackers are then ahead of the durable rows, which is
what a `--resume` must replay without logging a point twice."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from testbed.store import RunStore, read_table
from testbed.tracking.config import TrackingConfig
from testbed.tracking.session import start_tracking

TABLES = ("episodes", "evals", "updates")
STYLES = ("cute", "chuunibyou", "classical")  # tests/data/tiny.yaml's targets, in order


def rows_between(source: Path, low: float, high: float) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table in TABLES:
        rows = read_table(source, table).to_dict("records")
        out[table] = [row for row in rows if low <= row["t"] < high]
    return out


def append(store: RunStore, parts: dict[str, list[dict[str, Any]]]) -> None:
    for table, rows in parts.items():
        if rows:
            store.append(table, rows)


def switches(source: Path) -> list[tuple[int, str, str]]:
    clocks = json.loads((source / "manifest.json").read_text())["switch_points"]
    return [(t, STYLES[k], STYLES[k + 1]) for k, t in enumerate(clocks)]


def cursor(run_dir: Path, backend: str, key: str) -> int:
    try:
        state = json.loads((run_dir / "tracking.json").read_text())
        return int(state[backend]["cursor"][key]["update"][0])
    except (OSError, ValueError, KeyError):
        return -1


def in_wandb_files(run_dir: Path, key: str) -> int:
    """The last update W&B's own files hold for `key` (its service writes them after the cursor)."""
    from testbed.tracking.wandb_log import logged_cursors, run_folders

    try:
        run_id = json.loads((run_dir / "tracking.json").read_text())["wandb"]["runs"][key]["id"]
    except (OSError, ValueError, KeyError):
        return -1
    return logged_cursors(run_folders(run_dir / "wandb", run_id)).get("update", (-1, -1))[0]


def main(source: Path, target: Path, config: TrackingConfig, durable_t: int, held_t: int) -> None:
    store = RunStore(target, flush_rows=10**6, flush_seconds=math.inf)
    manifest = json.loads((source / "manifest.json").read_text())
    store.write_manifest({"status": "running", "switch_points": manifest["switch_points"]})
    start_tracking(config, store, {"name": "tiny"}, switches(source), log=lambda message: None)
    append(store, rows_between(source, 0, durable_t))
    store.flush()
    held = rows_between(source, durable_t, held_t)
    append(store, held)  # never flushed
    last = {(row["arm"], int(row["seed"])): int(row["update"]) for row in held["updates"]}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        held = [cursor(target, b, f"{a}-seed{s}") >= u for b in config.backends for (a, s), u in last.items()]
        if "wandb" in config.backends:
            held += [in_wandb_files(target, f"{a}-seed{s}") >= u for (a, s), u in last.items()]
        if all(held):
            print("ready", flush=True)
            break
        time.sleep(0.05)
    time.sleep(600)


if __name__ == "__main__":
    source, target, config, durable, held = sys.argv[1:6]
    main(Path(source), Path(target), TrackingConfig(**json.loads(config)), int(durable), int(held))
