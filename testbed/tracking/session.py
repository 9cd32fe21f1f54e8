"""A run's trackers, from start to finish: the sink `RunStore.append` calls with every row.

`start_tracking` (the CLI, in the one process that writes the run directory) checks the extra,
builds the session and hooks it to the store; `close` hands the report to the trackers and waits
for them (a bounded time). A resumed run first replays the durable rows, so the trackers get the
rows written before the kill that they had not flushed yet, and the cursors skip what they hold."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from testbed.store import RunStore, read_table
from testbed.tracking.config import TrackingConfig, check_extras
from testbed.tracking.points import RowMirror
from testbed.tracking.run_info import RunInfo, public
from testbed.tracking.state import TrackingState
from testbed.tracking.writer import Backend, BackgroundWriter, Finish

CLOSE_TIMEOUT_S = 120.0
REPLAYED = ("episodes", "evals", "updates")  # the tables the trackers mirror


def factories(info: RunInfo) -> dict[str, Callable[[], Backend]]:
    def build(name: str) -> Backend:
        if name == "tensorboard":
            from testbed.tracking.tensorboard_backend import TensorBoardBackend

            return TensorBoardBackend(info)
        if name == "mlflow":
            from testbed.tracking.mlflow_backend import MLflowBackend

            return MLflowBackend(info)
        from testbed.tracking.wandb_backend import WandbBackend

        return WandbBackend(info)

    return {name: (lambda name=name: build(name)) for name in info.config.backends}  # type: ignore[misc]


class TrackingSession:
    def __init__(self, info: RunInfo, store: RunStore):
        self.info, self.store = info, store
        self.mirror = RowMirror(info.config, info.switches)
        state, config = TrackingState(store.root), info.config
        self.writers = [
            BackgroundWriter(name, factory, state, config.flush_seconds, config.queue_size)
            for name, factory in factories(info).items()
        ]

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        """The store's sink: this table's new rows, as points for every backend's writer."""
        for item in self.mirror.points(table, rows):
            for writer in self.writers:
                writer.put(item)

    def replay(self) -> None:
        for table in REPLAYED:
            frame = read_table(self.store.root, table)
            if not frame.empty:
                self.append(table, frame.to_dict("records"))

    def close(self) -> None:
        """Finish every tracker run: with the report's files if the run is done, else as interrupted."""
        manifest = self.store.read_manifest()
        done = manifest.get("status") == "done"
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for writer in self.writers:
            writer.put(Finish(self.store.root if done else None))
        for writer in self.writers:  # side by side: the slowest sets the wait, within one deadline
            writer.close(max(deadline - time.monotonic(), 0.1))


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
