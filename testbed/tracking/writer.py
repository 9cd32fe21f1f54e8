"""The background writer: one thread that writes every tracker, so the loop only ever queues.

A backend that fails to start or to write is switched off with one warning naming it; the others
go on, and the run's own tables are never touched. Every `flush_seconds` the writer flushes each
backend and then saves the cursors (state.py), so what the state says was logged is on disk.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from testbed.tracking.points import Opened, Point
from testbed.tracking.state import TrackingState


class TrackingWarning(UserWarning):
    """A tracker failed; the run goes on without it."""


@dataclass(frozen=True)
class Finish:
    """The run is over: the report's files and headline figures go to the trackers, then they close."""

    run_dir: Path | None  # None: the run did not finish (stopped, interrupted): close without a report


class Backend(Protocol):
    name: str

    def start(self, saved: dict[str, Any]) -> dict[str, Any]:
        """Open (or, with `saved` ids, continue) the run's parent; returns the ids to keep."""

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        """Open or continue an arm x seed's run; returns its ids to keep."""

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        """Whether the backend holds `point` already (`cursor`: the stream's last logged seq, step)."""

    def log(self, point: Point) -> None: ...

    def flush(self) -> None: ...

    def finish(self, run_dir: Path | None) -> None:
        """The report's artifacts and summary (if `run_dir`), then end every run it opened."""


STOP = object()


class BackgroundWriter:
    """`factories` build the backends in the writer's thread: importing a tracker library and opening
    its store take seconds, which the loop does not wait for."""

    def __init__(
        self,
        factories: dict[str, Callable[[], Backend]],
        state: TrackingState,
        flush_seconds: float,
        queue_size: int,
    ):
        self.factories, self.state, self.flush_seconds = factories, state, flush_seconds
        self.live: list[Backend] = []
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self.failures: list[str] = []
        self.dropped = 0
        self.thread = threading.Thread(target=self.run, name="testbed-tracking", daemon=True)
        self.thread.start()

    def put(self, item: Point | Opened | Finish) -> None:
        """Queue without waiting: a full queue (a tracker far behind) drops the point, with one warning."""
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                warnings.warn(
                    "tracking: the trackers are behind by a full queue; points are dropped from the trackers "
                    "(never from the run directory)",
                    TrackingWarning,
                    stacklevel=2,
                )

    def close(self, timeout: float) -> None:
        """Write what is queued, finish, and stop; past `timeout` seconds the run ends without waiting."""
        with contextlib.suppress(queue.Full):  # a writer this far behind is not waited for
            self.queue.put(STOP, timeout=timeout)
        self.thread.join(timeout)
        if self.thread.is_alive():
            warnings.warn(
                f"tracking: the trackers did not finish within {timeout:.0f} s; the run ends without waiting",
                TrackingWarning,
                stacklevel=2,
            )

    def run(self) -> None:
        for name, factory in self.factories.items():
            try:
                self.live.append(factory())
            except Exception as exc:  # the library itself fails to load or to find its store
                self.fail(name, "start", exc)
        for backend in list(self.live):
            self.attempt(backend, "start", self.started)
        last_flush = time.monotonic()
        while True:
            try:
                item = self.queue.get(timeout=self.flush_seconds)
            except queue.Empty:
                item = None
            if item is STOP:
                break
            if item is not None:
                self.apply(item)
            if time.monotonic() - last_flush >= self.flush_seconds:
                self.flush()
                last_flush = time.monotonic()
        self.flush()

    def apply(self, item: Point | Opened | Finish) -> None:
        if isinstance(item, Finish):
            self.flush()
        for backend in list(self.live):
            if isinstance(item, Opened):
                self.attempt(backend, "open a run", lambda b: self.opened(b, item))
            elif isinstance(item, Point):
                cursor = self.state.cursor(backend.name, item.key, item.stream)
                if not backend.skip(item, cursor):
                    self.attempt(backend, "write", lambda b: self.logged(b, item))
            else:
                self.attempt(backend, "finish", lambda b: b.finish(item.run_dir))

    def started(self, backend: Backend) -> None:
        parent = self.state.backend(backend.name)["parent"]
        parent.update(backend.start(parent))

    def opened(self, backend: Backend, item: Opened) -> None:
        runs = self.state.backend(backend.name)["runs"]
        cursors = self.state.cursors(backend.name, item.key)
        runs[item.key] = backend.open(item.key, item.arm, item.seed, runs.get(item.key, {}), cursors)

    def logged(self, backend: Backend, point: Point) -> None:
        backend.log(point)
        self.state.advance(backend.name, point.key, point.stream, point.seq, point.step)

    def flush(self) -> None:
        for backend in list(self.live):
            self.attempt(backend, "flush", lambda b: b.flush())
        try:
            self.state.save()
        except OSError as exc:
            self.warn(f"tracking: cannot save {self.state.path.name} ({exc}); a --resume may log some points twice")

    def attempt(self, backend: Backend, what: str, action: Any) -> None:
        try:
            action(backend)
        except Exception as exc:  # any library's failure: warn once, switch this backend off
            self.live.remove(backend)
            self.fail(backend.name, what, exc)

    def fail(self, name: str, what: str, exc: Exception) -> None:
        message = (
            f"tracking: {name} failed to {what} ({type(exc).__name__}: {str(exc)[:300]}); it is off for the "
            "rest of this run. Training goes on and every row is still written to the run directory."
        )
        self.failures.append(message)
        self.state.data["failures"] = [*self.state.data.get("failures", []), message]
        self.warn(message)

    def warn(self, message: str) -> None:
        warnings.warn(message, TrackingWarning, stacklevel=2)
