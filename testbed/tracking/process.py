"""The tracking process: every tracker of a run is written here, not in the run's own process.

Importing three tracker libraries, building MLflow's store and writing each metric through its SQL
store cost seconds of CPU, and in the run's process that CPU (and the GIL) would be taken from the
loop. So the run (session.py) starts `python -m testbed.tracking.process` and only hands it the
rows; here they become points (points.py) for a writer thread per backend (writer.py), and the
cursors go to RUN/tracking.json as before. A plain subprocess rather than multiprocessing's spawn:
spawn imports the parent's main module again (the CLI, torch) in the child.

Protocol, pickled frames on the pipes: the run writes ("start", RunInfo), then lists of ("rows",
table, rows) and last ("close", run_dir or None) on this process's stdin; this process answers
("warn", message) and ("done", figures) on the stdout it was given (the libraries' own prints go
to stderr). An end of stdin before "close" means the run was killed: this process ends at once,
as the trackers' threads died with the run's process before, so what it had not flushed is not
claimed in RUN/tracking.json and a --resume logs it.
"""

from __future__ import annotations

import os
import pickle
import resource
import sys
import threading
import time
from typing import Any, BinaryIO

from testbed.tracking.points import RowMirror
from testbed.tracking.run_info import RunInfo
from testbed.tracking.state import TrackingState
from testbed.tracking.writer import Backend, BackgroundWriter, Finish

CLOSE_TIMEOUT_S = 120.0


def build(name: str, info: RunInfo) -> Backend:
    if name == "tensorboard":
        from testbed.tracking.tensorboard_backend import TensorBoardBackend

        return TensorBoardBackend(info)
    if name == "mlflow":
        from testbed.tracking.mlflow_backend import MLflowBackend

        return MLflowBackend(info)
    from testbed.tracking.wandb_backend import WandbBackend

    return WandbBackend(info)


class Replies:
    """This process's answers to the run; the writer threads warn side by side, hence the lock."""

    def __init__(self, out: BinaryIO):
        self.out, self.lock = out, threading.Lock()

    def send(self, kind: str, value: Any) -> None:
        with self.lock:
            try:
                pickle.dump((kind, value), self.out)
                self.out.flush()
            except OSError:  # the run is gone: nobody to tell
                pass


class Trackers:
    def __init__(self, info: RunInfo, replies: Replies):
        config = info.config
        self.mirror = RowMirror(config, info.switches)
        state = TrackingState(info.run_dir)
        self.writers = [
            BackgroundWriter(
                name,
                (lambda name=name: build(name, info)),  # type: ignore[misc]
                state,
                config.flush_seconds,
                config.queue_size,
                warn=lambda message: replies.send("warn", message),
            )
            for name in config.backends
        ]

    def rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        for item in self.mirror.points(table, rows):
            for writer in self.writers:
                writer.put(item)

    def close(self, run_dir: Any) -> dict[str, Any]:
        """Finish every tracker (with the report if `run_dir`), side by side within one deadline."""
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for writer in self.writers:
            writer.put(Finish(run_dir))
        for writer in self.writers:
            writer.close(max(deadline - time.monotonic(), 0.1))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "writers": {w.name: {"cpu_s": w.cpu_seconds, "start_cpu_s": w.start_cpu_seconds} for w in self.writers},
        }


def serve(commands: BinaryIO, replies: Replies) -> None:
    try:
        kind, info = pickle.load(commands)
        assert kind == "start", kind
        trackers = Trackers(info, replies)
        while True:
            for message in pickle.load(commands):
                if message[0] == "rows":
                    trackers.rows(message[1], message[2])
                else:  # "close"
                    replies.send("done", trackers.close(message[1]))
                    return
    except EOFError:  # the run was killed (or never started us properly): end as it did
        os._exit(1)
    except Exception as exc:  # a bug here: the run goes on untracked, and says so
        replies.send("warn", f"tracking: the tracking process failed ({type(exc).__name__}: {str(exc)[:300]})")
        os._exit(1)


def main() -> None:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a library's print must not corrupt the replies
    serve(sys.stdin.buffer, Replies(out))
    out.close()
    os._exit(0)  # a writer stuck past the deadline (a daemon thread) is not waited for


if __name__ == "__main__":
    main()
