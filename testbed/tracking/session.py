"""A run's trackers, from start to finish: the sink `RunStore.append` calls with every row.

`start_tracking` (the CLI, in the one process that writes the run directory) checks the extra,
starts the tracking process (process.py) and hooks the session to the store. The loop's share of
the work is a copy of each row put on a queue; a thread pickles the queue into the process's pipe.
`close` hands the report to the trackers and waits for them (a bounded time). A resumed run first
replays the durable rows, so the trackers get the rows written before the kill that they had not
flushed yet, and the cursors skip what they hold."""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed.store import RunStore, read_table
from testbed.tracking.config import TrackingConfig, check_extras
from testbed.tracking.process import CLOSE_TIMEOUT_S
from testbed.tracking.run_info import RunInfo, public
from testbed.tracking.writer import TrackingWarning

REPLAYED = ("episodes", "evals", "updates")  # the tables the trackers mirror
EPISODE_COLUMNS = ("arm", "seed", "t", "reward")  # all the rolling reward needs of an episode (not its text)
STOP = object()
SOURCE = str(Path(__file__).resolve().parents[2])  # this testbed, for the process's imports


def slim(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the trackers need of the rows, copied (the caller may reuse its dicts)."""
    if table == "episodes":
        return [{k: row.get(k) for k in EPISODE_COLUMNS} for row in rows]
    return [dict(row) for row in rows]


class TrackingSession:
    def __init__(self, info: RunInfo, store: RunStore):
        self.info, self.store = info, store
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": SOURCE + (os.pathsep + path if path else "")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "testbed.tracking.process"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        pickle.dump(("start", info), self.process.stdin)
        self.process.stdin.flush()
        self.outbox: queue.Queue[Any] = queue.Queue(maxsize=info.config.queue_size)
        self.said: list[str] = []  # the process's warnings, shown from the loop's thread
        self.stats: dict[str, Any] = {}  # the process's CPU and its writers', once it is done
        self.dropped = 0
        self.feed_cpu_s = 0.0  # the feeding thread's CPU time (benchmarks/tracking_overhead.py)
        self.feeder = threading.Thread(target=self.feed, name="testbed-tracking-feed", daemon=True)
        self.reader = threading.Thread(target=self.read, name="testbed-tracking-read", daemon=True)
        self.feeder.start()
        self.reader.start()

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        """The store's sink: this table's new rows, queued for the tracking process."""
        self.show()
        if table not in REPLAYED or not rows:
            return
        try:
            self.outbox.put_nowait(("rows", table, slim(table, rows)))
        except queue.Full:  # the process far behind: its points are dropped, never a row
            self.dropped += 1
            if self.dropped == 1:
                said = "tracking: the trackers are a full queue behind; rows are not mirrored (the tables have them)"
                warnings.warn(said, TrackingWarning, stacklevel=2)

    def feed(self) -> None:
        """Pickle what is queued into the process's stdin, a batch per frame, until STOP."""
        pipe = self.process.stdin
        assert pipe is not None
        while True:
            batch = [self.outbox.get()]
            while len(batch) < 512:
                try:
                    batch.append(self.outbox.get_nowait())
                except queue.Empty:
                    break
            frame = [item for item in batch if item is not STOP]
            try:
                if frame:
                    pickle.dump(frame, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                    pipe.flush()
                if len(frame) < len(batch):
                    pipe.close()
                    break
            except OSError:  # the process is gone; close() says so
                break
        self.feed_cpu_s = time.thread_time()

    def read(self) -> None:
        pipe = self.process.stdout
        assert pipe is not None
        while True:
            try:
                kind, value = pickle.load(pipe)
            except (EOFError, OSError, pickle.UnpicklingError):
                return
            if kind == "warn":
                self.said.append(value)
            else:
                self.stats = value

    def show(self) -> None:
        while self.said:
            warnings.warn(self.said.pop(0), TrackingWarning, stacklevel=3)

    def replay(self) -> None:
        for table in REPLAYED:
            frame = read_table(self.store.root, table)
            if not frame.empty:
                columns = list(EPISODE_COLUMNS) if table == "episodes" else list(frame.columns)
                self.append(table, frame[columns].to_dict("records"))

    def close(self) -> None:
        """Finish every tracker run: with the report's files if the run is done, else as interrupted."""
        done = self.store.read_manifest().get("status") == "done"
        self.outbox.put(("close", self.store.root if done else None))
        self.outbox.put(STOP)
        try:
            self.process.wait(CLOSE_TIMEOUT_S + 10)
        except subprocess.TimeoutExpired:
            self.said.append(f"tracking: the trackers did not finish within {CLOSE_TIMEOUT_S:.0f} s; stopped")
            self.process.kill()
            self.process.wait()
        self.feeder.join(5)
        self.reader.join(5)
        if not self.stats and not self.said:
            self.said.append(f"tracking: the tracking process ended early (exit {self.process.returncode})")
        self.show()


def start_tracking(
    config: TrackingConfig,
    store: RunStore,
    scenario: dict[str, Any],
    switches: list[tuple[int, str, str]],
    log: Callable[[str], None],
) -> TrackingSession | None:
    """The session of a run whose scenario turns trackers on (None otherwise), hooked to `store`."""
    if not config.backends:
        return None
    check_extras(config)
    manifest = store.read_manifest()
    info = RunInfo(
        run_dir=store.root,
        name=store.root.name,
        experiment=config.experiment or str(scenario["name"]),
        group=config.group or store.root.name,
        scenario=public(json.loads(json.dumps(scenario, default=str))),
        scenario_yaml=yaml.safe_dump(public(scenario), sort_keys=False),
        git_commit=manifest.get("git_commit"),
        config=config,
        switches=switches,
    )
    session = TrackingSession(info, store)
    if manifest.get("resumes"):
        session.replay()
    store.sinks.append(session)
    log(f"tracking: {', '.join(config.backends)} ({where(info)})")
    return session


def switches_of(schedule: Any) -> list[tuple[int, str, str]]:
    """Each switch of a drift schedule: its clock, the target before and after."""
    return [(t, schedule.target(t - 1).style, schedule.target(t).style) for t in schedule.switch_points()]


def where(info: RunInfo) -> str:
    """How to open each tracker on this run, for the console."""
    store = info.config.mlflow_uri or f"sqlite:///{info.run_dir / 'mlflow' / 'mlflow.db'}"
    places = {
        "tensorboard": f"tensorboard --logdir {info.run_dir / 'tb'}",
        "mlflow": f"mlflow ui --backend-store-uri {store}",
        "wandb": f"wandb sync {info.run_dir / 'wandb'}/offline-run-*"
        if info.config.wandb_mode == "offline"
        else "online",
    }
    return "; ".join(places[b] for b in info.config.backends)
