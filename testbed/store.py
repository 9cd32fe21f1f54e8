"""The run directory: everything an experiment observed, written as it happens.

    runs/<scenario>-<timestamp>/
      scenario.yaml      the resolved scenario (defaults filled in)
      manifest.json      versions, git commit, seeds, machine, status, per-arm totals
      episodes.parquet/  one row per judged (or failed) episode
      updates.parquet/   one row per trainer update
      evals.parquet/     held-out style shares over time
      reference.parquet/ per phase, the reward of the starting policy told the target (the arms' common bar)
      checkpoints/
      .lock              held by the one process writing the directory (see RunStore.lock)

A table is a directory of parquet parts (pandas, pyarrow and duckdb read it as one table).
Rows are buffered and flushed as a new part (every `flush_rows` rows or `flush_seconds`, whichever
comes first), written to a temporary name and renamed, so a crash loses at most the rows since the
last flush and never a whole table. Each part's name carries the first 16 hex digits of its
sha256, so a truncated or overwritten part is detected (and skipped, with a warning) on reading,
and refused on resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from filelock import FileLock, Timeout

# dropped: episodes too stale to train on (runtime.max_staleness); reference: the starting policy told the
# target, per phase
TABLES = ("episodes", "updates", "evals", "dropped", "reference")
PART = re.compile(r"^part-(\d{6})-([0-9a-f]{16})\.parquet$")  # index and the first 16 hex of its sha256
RUN_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # as arm names; "." and ".." are refused besides
LOCK_NAME = ".lock"


class CorruptRunError(RuntimeError):
    """A run directory whose durable parts do not match what was written."""


class RunInUseError(RuntimeError):
    """Another process holds the run directory's lock (a run or a `--resume` still writing it)."""


def check_run_name(name: str) -> str:
    """A run name is one plain directory name, so the run directory stays inside its parent."""
    if not RUN_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"{name!r}: not a plain name (use letters, digits, '_', '.' and '-', not '.' or '..'), "
            "so the run directory stays inside --out"
        )
    return name


def _sha16(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def part_problem(path: Path) -> str | None:
    """Why a part cannot be trusted (a name that is not ours, a checksum mismatch), or None."""
    match = PART.match(path.name)
    if match is None:
        return "not a part name this store writes"
    if _sha16(path) != match.group(2):
        return "checksum mismatch (truncated or overwritten after it was written)"
    return None


class Table:
    def __init__(self, root: Path, name: str, flush_rows: int, flush_seconds: float = 30.0):
        self.dir = root / f"{name}.parquet"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.rows: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()

    def part_names(self) -> list[str]:
        return sorted(p.name for p in self.dir.glob("part-*.parquet"))

    def next_index(self) -> int:
        indices = [int(m.group(1)) for m in map(PART.match, self.part_names()) if m]
        return max(indices, default=-1) + 1

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
        index = self.next_index()
        tmp = self.dir / f"part-{index:06d}.tmp"
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh)
            fh.flush()
            os.fsync(fh.fileno())
        # The checksum goes into the name, so a part and its check appear together, atomically.
        os.replace(tmp, self.dir / f"part-{index:06d}-{_sha16(tmp)}.parquet")
        self.rows = []
        self.last_flush = time.monotonic()


class RunStore:
    def __init__(self, root: Path, flush_rows: int = 512, flush_seconds: float = 30.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "checkpoints").mkdir(exist_ok=True)
        self.tables = {name: Table(self.root, name, flush_rows, flush_seconds) for name in TABLES}
        self._lock: FileLock | None = None
        self.sinks: list[Any] = []  # each gets `append(table, rows)` too: the trackers (testbed/tracking)

    def lock(self) -> None:
        """Hold the directory's lock until `unlock` (or the process ends: the OS drops it), so a
        second writer (two `--resume` of one run) is refused instead of interleaving rows."""
        lock = FileLock(self.root / LOCK_NAME, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise RunInUseError(
                f"{self.root} is in use by another process (it holds {self.root / LOCK_NAME}); "
                "wait for that run or --resume to end"
            ) from None
        self._lock = lock

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @classmethod
    def create(
        cls,
        out_dir: str | Path,
        scenario_name: str,
        flush_rows: int = 512,
        flush_seconds: float = 30.0,
        run_name: str | None = None,
    ) -> RunStore:
        """A new run directory under `out_dir`: `run_name` if given (refused if it exists), else
        `<scenario>-<timestamp>`; locked (see `lock`). Fails before any training: ValueError for a
        name that is not plain, OSError if the directory cannot be written."""
        out_dir = Path(out_dir)
        if run_name is not None:
            root = out_dir / check_run_name(run_name)
            if not _claim(root):
                raise FileExistsError(
                    f"run directory {root} already exists; continue it with --resume {root} or choose another name"
                )
        else:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            root, suffix = out_dir / f"{scenario_name}-{stamp}", 1
            while not _claim(root):  # two runs in the same second get distinct directories
                root, suffix = out_dir / f"{scenario_name}-{stamp}-{suffix}", suffix + 1
        store = cls(root, flush_rows, flush_seconds)
        store.lock()
        probe = store.root / ".write-test"
        probe.write_bytes(b"ok")
        probe.unlink()
        return store

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.tables[table].append(rows)
        for sink in list(self.sinks):  # a view of the rows: it never costs the tables a row
            try:
                sink.append(table, rows)
            except Exception as exc:
                self.sinks.remove(sink)
                warnings.warn(f"tracking: off for the rest of this run ({type(exc).__name__}: {exc})", stacklevel=2)

    def flush(self) -> None:
        for table in self.tables.values():
            table.flush()

    def snapshot(self) -> dict[str, list[str]]:
        """The durable parts of every table, after a flush: what a checkpoint remembers."""
        self.flush()
        return {name: table.part_names() for name, table in self.tables.items()}

    def restore(self, snapshot: dict[str, list[str]]) -> dict[str, list[str]]:
        """Roll the tables back to a checkpoint's snapshot for a resume.

        Every part the snapshot lists must be present and intact (else CorruptRunError naming it).
        Parts written after the snapshot hold rows the resumed run will write again; they are moved
        to `discarded/<table>/` (not deleted, not read as data). Half-written `.tmp` parts go too.
        Returns what was moved, per table."""
        moved: dict[str, list[str]] = {}
        for name, table in self.tables.items():
            keep = set(snapshot.get(name, []))
            for part in sorted(keep):
                path = table.dir / part
                if not path.exists():
                    raise CorruptRunError(f"{path}: listed in the checkpoint but missing")
                problem = part_problem(path)
                if problem:
                    raise CorruptRunError(
                        f"{path}: {problem}. Its rows cannot be trusted; move the file out of "
                        f"{table.dir} to resume without them."
                    )
            extra = [p for p in sorted(table.dir.iterdir()) if p.name not in keep and not p.name.startswith((".", "_"))]
            if extra:
                target = self.root / "discarded" / name
                target.mkdir(parents=True, exist_ok=True)
                for path in extra:
                    os.replace(path, target / path.name)
                moved[name] = [p.name for p in extra]
            table.rows = []
        return moved

    def write_scenario(self, resolved: dict[str, Any]) -> None:
        (self.root / "scenario.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        tmp = self.root / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, default=str))
        os.replace(tmp, self.root / "manifest.json")

    def read_manifest(self) -> dict[str, Any]:
        """The run's manifest ({} if there is none yet); CorruptRunError naming the file, and what to
        do, if it is not a JSON object (cut short by a full disk or a copy that stopped)."""
        path = self.root / "manifest.json"
        if not path.exists():
            return {}
        try:
            manifest = json.loads(path.read_text())
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise CorruptRunError(damaged_manifest(path, str(exc))) from None
        if not isinstance(manifest, dict):
            raise CorruptRunError(damaged_manifest(path, f"a JSON {type(manifest).__name__}, not an object"))
        return manifest


def damaged_manifest(path: Path, problem: str) -> str:
    """What a damaged manifest means for the run and what the user can do."""
    return (
        f"{path} is damaged ({problem}): cut short by a full disk or a copy that stopped, perhaps. The run's "
        "tables and checkpoints beside it are untouched. Put back a good copy of manifest.json, or move this "
        f"one aside (mv {path} {path}.damaged) and --resume again: the run then continues from its last "
        "checkpoint (or its start, without one) with a new manifest; its start time and its list of earlier "
        "resumes are lost."
    )


def _claim(root: Path) -> bool:
    """Create `root` unless it exists (one atomic mkdir, so two processes never share it)."""
    try:
        root.mkdir(parents=True)
    except FileExistsError:
        if root.exists():
            return False
        raise  # e.g. a dangling symlink: never loop on it
    return True


def read_table(run_dir: str | Path, name: str) -> pd.DataFrame:
    """A table of a run directory as one DataFrame (empty if nothing was written). A part whose
    checksum does not match is skipped with a warning naming it, never read as data."""
    directory = Path(run_dir) / f"{name}.parquet"
    parts = sorted(directory.glob("part-*.parquet")) if directory.is_dir() else []
    frames = []
    for path in parts:
        problem = part_problem(path)
        if problem:
            warnings.warn(f"skipping {path}: {problem}", stacklevel=2)
            continue
        frames.append(pd.read_parquet(path))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def base_manifest(scenario_name: str, seeds: list[int], digest: str) -> dict[str, Any]:
    import torch
    import transformers

    def git_commit() -> str | None:
        try:
            return (
                subprocess.run(
                    ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
                ).stdout.strip()
                or None
            )
        except (OSError, subprocess.SubprocessError):
            return None

    return {
        "scenario": scenario_name,
        "scenario_digest": digest,
        "seeds": seeds,
        "started": datetime.now(UTC).isoformat(),
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
