"""The run directory: everything an experiment observed, written as it happens.

    runs/<scenario>-<timestamp>/
      scenario.yaml      the resolved scenario (defaults filled in)
      manifest.json      versions, git commit, seeds, machine, status, per-arm totals
      episodes.parquet/  one row per judged (or failed) episode
      updates.parquet/   one row per trainer update
      evals.parquet/     held-out style shares over time
      checkpoints/

A table is a directory of parquet parts (pandas, pyarrow and duckdb read it as one table).
Rows are buffered and flushed as a new part (every `flush_rows` rows or `flush_seconds`, whichever
comes first), written to a temporary name and renamed, so a crash loses at most the rows since the
last flush and never a whole table.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

TABLES = ("episodes", "updates", "evals")


class Table:
    def __init__(self, root: Path, name: str, flush_rows: int, flush_seconds: float = 30.0):
        self.dir = root / f"{name}.parquet"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.rows: list[dict[str, Any]] = []
        self.parts = len(list(self.dir.glob("part-*.parquet")))
        self.last_flush = time.monotonic()

    def append(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        if len(self.rows) >= self.flush_rows or time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        # Rows may differ in keys (a warm-up update has no policy loss): keep the union, in order
        # of first appearance, with nulls where a row lacks a key. (from_pylist would take the
        # first row's keys and silently drop the rest.)
        columns = list(dict.fromkeys(key for row in self.rows for key in row))
        table = pa.Table.from_pydict({key: [row.get(key) for row in self.rows] for key in columns})
        final = self.dir / f"part-{self.parts:06d}.parquet"
        tmp = final.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)  # atomic: a reader sees the whole part or none of it
        self.parts += 1
        self.rows = []
        self.last_flush = time.monotonic()


class RunStore:
    def __init__(self, root: Path, flush_rows: int = 512, flush_seconds: float = 30.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "checkpoints").mkdir(exist_ok=True)
        self.tables = {name: Table(self.root, name, flush_rows, flush_seconds) for name in TABLES}

    @classmethod
    def create(cls, out_dir: str | Path, scenario_name: str, flush_rows: int = 512, flush_seconds: float = 30.0) -> RunStore:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        root = Path(out_dir) / f"{scenario_name}-{stamp}"
        suffix = 1
        while root.exists():  # two runs in the same second get distinct directories
            root = Path(out_dir) / f"{scenario_name}-{stamp}-{suffix}"
            suffix += 1
        return cls(root, flush_rows, flush_seconds)

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.tables[table].append(rows)

    def flush(self) -> None:
        for table in self.tables.values():
            table.flush()

    def write_scenario(self, resolved: dict[str, Any]) -> None:
        (self.root / "scenario.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        tmp = self.root / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, self.root / "manifest.json")

    def read_manifest(self) -> dict[str, Any]:
        path = self.root / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else {}


def read_table(run_dir: str | Path, name: str) -> pd.DataFrame:
    """A table of a run directory as one DataFrame (empty if nothing was written)."""
    directory = Path(run_dir) / f"{name}.parquet"
    parts = sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []
    if not parts:
        return pd.DataFrame()
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def base_manifest(scenario_name: str, seeds: list[int], digest: str) -> dict[str, Any]:
    import torch
    import transformers

    def git_commit() -> str | None:
        try:
            return subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
            ).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    return {
        "scenario": scenario_name,
        "scenario_digest": digest,
        "seeds": seeds,
        "started": datetime.now(timezone.utc).isoformat(),
        "status": "running",
        "git_commit": git_commit(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "pandas": pd.__version__,
            "pyarrow": pa.__version__,
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "processor": platform.machine()},
        "arms": {},
        "time": time.time(),
    }
