"""What the experiment trackers cost a run: the same arm x seed without trackers and with
TensorBoard, MLflow and W&B (offline) all on, interleaved, and the trackers' own time.

    python benchmarks/tracking_overhead.py [SCENARIO] [--arm NAME] [--set key=value ...] [--repeats N]

Target: under 2% of the run's time with all three backends (issue 28). The trackers write in their
own process (testbed/tracking/process.py), so what they cost the run is what its own process
spends on them and any wait at the end. Three figures, since on a shared machine the difference of
two wall times is noisier than 2%:

- wall, A/B: the tracked runs' wall time against the untracked ones (mean and spread over
  `--repeats`, the two kinds interleaved so a change in the machine's load falls on both);
- CPU, A/B: the same for the CPU time of the run's process (every thread of it), less noisy;
- accounted: in the run's process, the loop's time inside the trackers' sink (copying the rows
  onto a queue), the feeding thread's CPU (pickling them into the pipe) and the wait at the end
  for the tracking process to finish; beside it, that process's own CPU (on another core).

Runs in this process (one arm x seed, no Ray tasks), with the SFT policy from the cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed.cli import run_command as run
from testbed.scenario.schema import load_scenario
from testbed.tracking import session as tracking_session

BACKENDS = "tensorboard,mlflow,wandb"


class Accounting:
    """Times the loop spends in the sink and in `close`, the feeding thread's CPU and the tracking
    process's, per tracked run."""

    def __init__(self) -> None:
        self.runs: list[dict[str, float]] = []
        self.sink_s = 0.0
        cls = tracking_session.TrackingSession
        append, close = cls.append, cls.close

        def timed_append(session, table, rows):
            start = time.perf_counter()
            append(session, table, rows)
            self.sink_s += time.perf_counter() - start

        def timed_close(session):
            start = time.perf_counter()
            close(session)
            writers = session.stats.get("writers", {})
            self.runs.append(
                {
                    "sink_s": self.sink_s,
                    "close_s": time.perf_counter() - start,
                    "feed_cpu_s": session.feed_cpu_s,
                    "process_cpu_s": session.stats.get("cpu_s", float("nan")),
                    "start_cpu_s": sum(w["start_cpu_s"] for w in writers.values()),
                }
            )
            self.sink_s = 0.0

        cls.append, cls.close = timed_append, timed_close  # type: ignore[method-assign]


def one_run(scenario: str, overrides: list[str], track: bool) -> tuple[float, float]:
    """Wall and CPU seconds of the run's process (`process_time`: every thread, not the children)."""
    with tempfile.TemporaryDirectory() as out:
        flags = [item for o in overrides for item in ("--set", o)]
        wall, cpu = time.perf_counter(), time.process_time()
        code = run.main([scenario, "--out", out, "--no-report", *flags, *(["--track", BACKENDS] if track else [])])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if code != 0:
            raise SystemExit(code)
        if track:
            state = json.loads(next(Path(out).iterdir()).joinpath("tracking.json").read_text())
            assert not state.get("failures"), state["failures"]
    return wall, cpu


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:7.1f} s (sd {sd:5.1f}, {min(values):.1f}-{max(values):.1f})"


def report(plain: list[tuple[float, float]], tracked: list[tuple[float, float]], runs: list[dict[str, float]]) -> None:
    for k, what in ((0, "wall"), (1, "CPU ")):
        a, b = [p[k] for p in plain], [t[k] for t in tracked]
        pairs = [y / x - 1 for x, y in zip(a, b, strict=True)]
        print(f"  {what} untracked {spread(a)}")
        print(f"  {what} tracked   {spread(b)}")
        print(
            f"  {what} A/B       {statistics.fmean(b) / statistics.fmean(a) - 1:+.2%} of the means; "
            f"pairwise {', '.join(f'{d:+.1%}' for d in pairs)}"
        )
    mean = {key: statistics.fmean(r[key] for r in runs) for key in runs[0]}
    wall = statistics.fmean(t[0] for t in tracked)
    spent = mean["sink_s"] + mean["feed_cpu_s"] + mean["close_s"]
    print(f"  sink in loop    {mean['sink_s']:8.3f} s")
    print(f"  feeding thread  {mean['feed_cpu_s']:8.3f} s CPU (pickling rows into the pipe)")
    print(f"  close (waiting) {mean['close_s']:8.2f} s")
    print(f"  accounted       {spent:8.2f} s = {spent / wall:.2%} of the tracked run's wall time")
    print(
        f"  tracking process {mean['process_cpu_s']:7.2f} s CPU on its own core, of which writers' start-up "
        f"{mean['start_cpu_s']:.2f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="scenarios/demo.yaml")
    parser.add_argument("--arm", help="arm name (default: the first)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-warm", action="store_true", help="skip the first (cache-filling) run")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, args.overrides)
    arm = next(a for a in scenario.arms if args.arm in (None, a.name))
    overrides = [
        *args.overrides,
        f"seeds=[{scenario.seeds[0]}]",
        f"arms=[{json.dumps(arm.model_dump())}]",
        "runtime.parallel_arms=false",
    ]
    if not args.no_warm:
        one_run(args.scenario, overrides, track=False)  # SFT policy and warm-up into the cache first
    plain, tracked, accounting = [], [], Accounting()
    for _ in range(args.repeats):  # interleaved: a change in the machine's load falls on both kinds
        plain.append(one_run(args.scenario, overrides, track=False))
        tracked.append(one_run(args.scenario, overrides, track=True))
    print(f"{arm.name} on {args.scenario}, {scenario.budget.episodes} episodes, {BACKENDS}, {args.repeats} repeat(s)")
    report(plain, tracked, accounting.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
