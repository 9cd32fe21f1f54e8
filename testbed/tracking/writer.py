"""The background writers: a thread per tracker, in the tracking process (process.py), so a slow
tracker delays neither the others nor, in the run's own process, the loop.

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
    """One backend's thread and queue, so a slow tracker delays neither the loop nor the others.
    `factory` builds the backend in this thread: importing a tracker library and opening its store
    take seconds, which the loop does not wait for."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], Backend],
        state: TrackingState,
        flush_seconds: float,
        queue_size: int,
        warn: Callable[[str], None] | None = None,
    ):
        self.name, self.factory, self.state, self.flush_seconds = name, factory, state, flush_seconds
        self.say = warn or (lambda message: warnings.warn(message, TrackingWarning, stacklevel=3))
        self.backend: Backend | None = None  # None until started, and again once it failed
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self.failure: str | None = None
        self.dropped = 0
        # logged but not flushed yet: goes into the shared state only after this backend's flush, so
        # the state file never claims a point a killed process still held in memory
        self.unflushed: dict[tuple[str, str], tuple[int, int]] = {}
        # this thread's CPU time once its backend started and when it ends (benchmarks/tracking_overhead.py)
        self.start_cpu_seconds = self.cpu_seconds = 0.0
        self.thread = threading.Thread(target=self.run, name=f"testbed-tracking-{name}", daemon=True)
        self.thread.start()

    def put(self, item: Point | Opened | Finish) -> None:
        """Queue without waiting: a full queue (a tracker far behind) drops the point, with one warning."""
        if self.failure is not None:
            return
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                self.warn(f"tracking: {self.name} is a full queue behind; its points are dropped (never a row)")

    def close(self, timeout: float) -> None:
        """Write what is queued, finish, and stop; past `timeout` seconds the run ends without waiting."""
        with contextlib.suppress(queue.Full):  # a writer this far behind is not waited for
            self.queue.put(STOP, timeout=timeout)
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.warn(f"tracking: {self.name} did not finish within {timeout:.0f} s; the run ends without it")

    def run(self) -> None:
        try:
            self.write()
        finally:
            self.cpu_seconds = time.thread_time()

    def write(self) -> None:
        try:
            self.backend = self.factory()
        except Exception as exc:  # the library itself fails to load or to find its store
            self.fail("start", exc)
            return
        self.attempt("start", self.started)
        self.start_cpu_seconds = time.thread_time()
        last_flush = time.monotonic()
        while self.backend is not None:
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
        backend = self.backend
        if backend is None:
            return
        if isinstance(item, Opened):
            self.attempt("open a run", lambda: self.opened(backend, item))
        elif isinstance(item, Point):
            cursor = self.unflushed.get((item.key, item.stream)) or self.state.cursor(self.name, item.key, item.stream)
            self.attempt("write", lambda: self.logged(backend, item, cursor))
        else:
            self.flush()
            if self.backend is not None:  # the flush may have switched it off
                self.attempt("finish", lambda: backend.finish(item.run_dir))

    def started(self) -> None:
        assert self.backend is not None
        with self.state.lock:
            parent = dict(self.state.backend(self.name)["parent"])
        ids = self.backend.start(parent)
        with self.state.lock:
            self.state.backend(self.name)["parent"].update(ids)

    def opened(self, backend: Backend, item: Opened) -> None:
        with self.state.lock:
            saved = dict(self.state.backend(self.name)["runs"].get(item.key, {}))
            cursors = self.state.cursors(self.name, item.key)
        ids = backend.open(item.key, item.arm, item.seed, saved, cursors)
        with self.state.lock:
            self.state.backend(self.name)["runs"][item.key] = ids

    def logged(self, backend: Backend, point: Point, cursor: tuple[int, int]) -> None:
        if backend.skip(point, cursor):  # held already (a resumed run); MLflow asks its store
            return
        backend.log(point)
        self.unflushed[(point.key, point.stream)] = (point.seq, point.step)

    def flush(self) -> None:
        backend = self.backend
        if backend is None:
            return
        self.attempt("flush", backend.flush)
        if self.backend is None:
            return
        for (key, stream), (seq, step) in self.unflushed.items():
            self.state.advance(self.name, key, stream, seq, step)
        self.unflushed = {}
        try:
            self.state.save()
        except OSError as exc:
            self.warn(f"tracking: cannot save {self.state.path.name} ({exc}); a --resume may log some points twice")

    def attempt(self, what: str, action: Callable[[], Any]) -> None:
        try:
            action()
        except Exception as exc:  # any library's failure: warn once, switch this backend off
            self.fail(what, exc)

    def fail(self, what: str, exc: Exception) -> None:
        self.backend = None
        self.failure = (
            f"tracking: {self.name} failed to {what} ({type(exc).__name__}: {str(exc)[:300]}); it is off for the "
            "rest of this run. Training goes on and every row is still written to the run directory."
        )
        self.state.note_failure(self.failure)
        with contextlib.suppress(OSError):
            self.state.save()
        self.warn(self.failure)

    def warn(self, message: str) -> None:
        self.say(message)
