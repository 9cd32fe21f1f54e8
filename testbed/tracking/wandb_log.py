"""Reading back a W&B run's transaction log (`run-<id>.wandb`), which wandb 0.31 writes from its Go
process and has no Python reader for: LevelDB log framing (32 KiB blocks, a 7-byte header per
chunk) around wandb's own protobuf `Record`s, after a 7-byte file header (":W&B", magic, version).

The backend reads what a killed process really wrote before it continues the run (the client's
queue dies with it); the tests read the history to compare it with the run's tables."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, LAST = 1, 4


def records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    if data[:4] != b":W&B":
        return
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            return
        pending += data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def history(folders: list[Path]) -> Iterator[dict[str, Any]]:
    """Every logged row of a run's folders (a resumed run has one per process), in order."""
    for folder in sorted(folders, key=lambda f: f.name):  # offline-run-<timestamp>-<id>: in time order
        for path in folder.glob("run-*.wandb"):
            for record in records(path):
                if record.WhichOneof("record_type") == "history":
                    yield {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }


def run_folders(root: Path, run_id: str) -> list[Path]:
    return sorted(root.glob(f"*run-*-{run_id}"), key=lambda f: f.name.split("run-", 1)[1])


def logged_cursors(folders: list[Path]) -> dict[str, tuple[int, int]]:
    """Per stream (points.py), the (seq, step) of the last point the files hold."""
    out: dict[str, tuple[int, int]] = {}
    schedule = -1
    for row in history(folders):
        t = int(row.get("t", -1))
        if "train/update" in row:
            out["update"] = (int(row["train/update"]), t)
        if any(key.startswith("eval/") for key in row):
            out["eval"] = (t, t)
        if "episodes/judged" in row:
            out["rolling"] = (int(row["episodes/judged"]), t)
        if "schedule/phase" in row:
            schedule += 1
            out["schedule"] = (schedule, t)
    return out
