"""How a run ends on the terminal and in its manifest: a stop on purpose or a judge plugin's bug
(`stopped`: exit 3 or 2), the judge outages a run met (`report_outages`), and the time a finished
run took, part by part (`Stopwatch`). The report of a finished run stays in testbed/cli/run_command.py,
the one place the core calls analysis."""

from __future__ import annotations

import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from rich.markup import escape

if TYPE_CHECKING:
    from testbed.store import RunStore

__all__ = ["Stopwatch", "cluster_failed", "report_outages", "stopped"]


class Stopwatch:
    """The seconds of a run's parts (`lap`), and the line that ends its console output."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else started
        self.last = time.time()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> float:
        """The seconds since the last lap (or the start), kept as part `name`."""
        now = time.time()
        self.laps[name] = round(now - self.last, 1)
        self.last = now
        return self.laps[name]

    def line(self) -> str:
        """'time: 1 min 52 s (SFT 31 s, arms 62 s, report 9 s)': from the command's start."""
        parts = ", ".join(f"{name} {duration(s)}" for name, s in self.laps.items())
        return f"time: {duration(time.time() - self.started)}" + (f" ({parts})" if parts else "")


def duration(seconds: float) -> str:
    """'52 s', '1 min 52 s', '1 h 2 min'."""
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def stopped(store: RunStore, manifest: dict[str, Any], exc: Exception, console: Any) -> int:
    """Record why the run stopped; exit 3 for a stop on purpose (a checkpoint to resume from), 2
    for a bug in a judge plugin, after its traceback (never 512 'failed' calls later)."""
    from testbed.runtimes.learn import RunStopped

    bug = not isinstance(exc, RunStopped)
    store.flush()
    manifest.update(status="failed" if bug else "stopped", stop_reason=str(exc))
    store.write_manifest(manifest)
    if bug:
        cause = exc.__cause__ or exc
        print("".join(traceback.format_exception(type(cause), cause, cause.__traceback__)), file=sys.stderr)
    label = "judge plugin error" if bug else "stopped"
    console.print(f"[red]{label}:[/] {escape(str(exc))}", markup=True, highlight=False)  # e.g. "[redacted]"
    return 2 if bug else 3


def cluster_failed(store: RunStore, manifest: dict[str, Any], exc: Exception, console: Any, verbose: bool) -> int:
    """A Ray cluster that cannot take the job (testbed/runtimes/ray/cluster.py's ClusterError): its
    message, not Ray's traceback (that with --verbose). Exit 2 while nothing of the run can be
    continued, 3 once a checkpoint or a finished arm x seed exists; either way --resume continues it."""
    store.flush()
    manifest.update(status="stopped", stop_reason=str(exc))
    store.write_manifest(manifest)
    if verbose:
        print("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), file=sys.stderr)
    resumable = bool(manifest["arms"]) or (store.root / "checkpoints" / "latest.json").exists()
    console.print(f"[red]Ray cluster:[/] {escape(str(exc))}", markup=True, highlight=False)
    console.print(f"continue with --resume {store.root} once the cluster is fixed", highlight=False)
    return 3 if resumable else 2


def report_outages(manifest: dict[str, Any], console: Any) -> None:
    """Judge outages are gaps in the attempts (the clock waits), reported here, never zeros."""
    for arm, seeds in manifest["arms"].items():
        for seed, totals in seeds.items():
            outages = totals.get("judge_outages") or []
            if outages:
                where = ", ".join(f"t={o['t']} ({o['failed_calls']} calls)" for o in outages[:5])
                more = f" and {len(outages) - 5} more" if len(outages) > 5 else ""
                console.print(
                    f"judge outages, {arm} seed {seed}: {len(outages)} ({totals['judge_failures']} failed calls "
                    f"not trained on): {where}{more}"
                )
