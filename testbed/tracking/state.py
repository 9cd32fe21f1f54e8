"""What the trackers of a run have logged, kept in RUN/tracking.json so `--resume` continues the
same tracker runs (their ids) and skips the points they already hold (each stream's cursor)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

FILE = "tracking.json"


class TrackingState:
    """Per backend: the parent run's ids, each arm x seed's ids and, per stream, the last `seq` it
    flushed. Saved after each flush of every backend, so a kill loses at most the points since."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / FILE
        self.lock = threading.RLock()  # each backend's writer thread reads and advances its own part
        try:
            self.data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def backend(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self.data.setdefault(name, {"parent": {}, "runs": {}, "cursor": {}})

    def cursor(self, name: str, key: str, stream: str) -> tuple[int, int]:
        """The (seq, step) of the last point of `stream` that backend `name` logged for `key`."""
        with self.lock:
            seq, step = self.backend(name)["cursor"].get(key, {}).get(stream, (-1, -1))
        return int(seq), int(step)

    def cursors(self, name: str, key: str) -> dict[str, tuple[int, int]]:
        with self.lock:
            saved = self.backend(name)["cursor"].get(key, {})
            return {stream: (int(v[0]), int(v[1])) for stream, v in saved.items()}

    def advance(self, name: str, key: str, stream: str, seq: int, step: int) -> None:
        with self.lock:
            self.backend(name)["cursor"].setdefault(key, {})[stream] = [seq, step]

    def note_failure(self, message: str) -> None:
        with self.lock:
            self.data["failures"] = [*self.data.get("failures", []), message]

    def save(self) -> None:
        with self.lock:
            text = json.dumps(self.data, indent=1, sort_keys=True)
            tmp = self.path.with_name(f"{FILE}.tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
