"""Live rows from parallel-arm tasks to the driver's trackers (testbed/tracking).

A parallel task writes its rows into a private store and hands the finished tables back when it
ends; the driver alone writes the run directory. The trackers, which the driver holds, would then
see an arm x seed only once it is over. So a task whose run is tracked also posts its rows, a few
seconds' worth at a time and without waiting, to a `RowRelay`; the driver takes them while it waits
for the tasks and hands them to its store's sinks (never to the tables: those come from the task's
tables, as before). The trackers skip what they already hold when the finished tables arrive.
"""

from __future__ import annotations

import time
from typing import Any

import ray


@ray.remote(num_cpus=0)
class RowRelay:
    def __init__(self) -> None:
        self.rows: list[tuple[str, list[dict[str, Any]]]] = []

    def post(self, rows: list[tuple[str, list[dict[str, Any]]]]) -> None:
        self.rows.extend(rows)

    def take(self) -> list[tuple[str, list[dict[str, Any]]]]:
        rows, self.rows = self.rows, []
        return rows


class RelayedRows:
    """A task's store sink: its rows, posted to the relay at most every `every_s` seconds."""

    def __init__(self, relay: Any, every_s: float = 2.0) -> None:
        self.relay, self.every_s, self.last = relay, every_s, time.monotonic()
        self.pending: list[tuple[str, list[dict[str, Any]]]] = []

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.pending.append((table, list(rows)))
        if time.monotonic() - self.last >= self.every_s:
            self.flush(wait=False)

    def flush(self, wait: bool = True) -> None:
        """Post what is pending (`wait`: before the task returns, so the driver has every row first)."""
        ref = self.relay.post.remote(self.pending)
        self.pending, self.last = [], time.monotonic()
        if wait:
            ray.get(ref)


def forward(relay: Any, store: Any) -> None:
    """The rows the tasks posted so far, to the driver's trackers (the store's sinks), not its tables."""
    for table, rows in ray.get(relay.take.remote()):
        for sink in list(store.sinks):
            sink.append(table, rows)
