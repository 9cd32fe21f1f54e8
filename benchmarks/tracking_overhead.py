"""What the experiment trackers cost a run: the same arm x seed without trackers and with
TensorBoard, MLflow and W&B (offline) all on, side by side, and the trackers' own time.

    python benchmarks/tracking_overhead.py [SCENARIO] [--arm NAME] [--set key=value ...] [--repeats N]

Target: under 2% of the run's time with all three backends (issue 28). Two figures, because on a
shared machine the difference of two wall times is noisier than 2%:

- accounted: the loop's time inside the trackers' sink (turning rows into points and queueing
  them), plus the CPU time of the writer threads (importing the libraries, opening the stores,
  writing; Python holds the GIL while it writes, so this is an upper bound on what they take from
  the loop), plus the wait at the end for the trackers to finish, over the tracked run's wall time;
- A/B: the wall time of the tracked run against the untracked one (min over `--repeats`).

Runs in this process (one arm x seed, no Ray tasks), with the SFT policy from the cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed.cli import run
from testbed.scenario.schema import load_scenario
from testbed.tracking import session as tracking_session

BACKENDS = "tensorboard,mlflow,wandb"


class Accounting:
    """Times the loop spends in the sink and in `close`, and the writers' CPU, of the sessions made."""

    def __init__(self) -> None:
        self.sink_s = self.close_s = self.writers_cpu_s = self.start_cpu_s = 0.0
        cls = tracking_session.TrackingSession
        append, close = cls.append, cls.close

        def timed_append(session, table, rows):
            start = time.perf_counter()
            append(session, table, rows)
            self.sink_s += time.perf_counter() - start

        def timed_close(session):
            start = time.perf_counter()
            close(session)
            self.close_s += time.perf_counter() - start
            self.writers_cpu_s += sum(w.cpu_seconds for w in session.writers)
            self.start_cpu_s += sum(w.start_cpu_seconds for w in session.writers)

        cls.append, cls.close = timed_append, timed_close  # type: ignore[method-assign]


def one_run(scenario: str, overrides: list[str], track: bool) -> float:
    with tempfile.TemporaryDirectory() as out:
        flags = [item for o in overrides for item in ("--set", o)]
        start = time.perf_counter()
        code = run.main([scenario, "--out", out, "--no-report", *flags, *(["--track", BACKENDS] if track else [])])
        wall = time.perf_counter() - start
        if code != 0:
            raise SystemExit(code)
        if track:
            state = json.loads(next(Path(out).iterdir()).joinpath("tracking.json").read_text())
            assert not state.get("failures"), state["failures"]
    return wall


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
    for _ in range(args.repeats):
        plain.append(one_run(args.scenario, overrides, track=False))
        tracked.append(one_run(args.scenario, overrides, track=True))
    n, wall = args.repeats, min(tracked)
    spent = accounting.sink_s / n + accounting.writers_cpu_s / n + accounting.close_s / n
    print(f"{arm.name} on {args.scenario}, {scenario.budget.episodes} episodes, {BACKENDS}, {n} repeat(s)")
    print(f"  untracked run   {min(plain):8.1f} s wall (min of {n})")
    print(f"  tracked run     {wall:8.1f} s wall (min of {n}): A/B {wall / min(plain) - 1:+.1%}")
    print(f"  sink in loop    {accounting.sink_s / n:8.3f} s")
    start = accounting.start_cpu_s / n
    print(f"  writer threads  {accounting.writers_cpu_s / n:8.2f} s CPU: start-up {start:.2f} s (imports, stores), ")
    print(f"                  then {accounting.writers_cpu_s / n - start:.2f} s writing")
    print(f"  close (waiting) {accounting.close_s / n:8.2f} s")
    print(f"  accounted       {spent:8.2f} s = {spent / wall:.2%} of the tracked run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
