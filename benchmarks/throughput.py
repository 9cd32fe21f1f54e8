"""Throughput of the online loop: episodes per second and where the wall time goes.

    python benchmarks/throughput.py [SCENARIO] [--arm NAME] [--set key=value ...]

Runs one arm with one seed of the scenario (default: scenarios/style_shift.yaml, its first arm)
into a temporary directory and prints the time split that the loop records in the manifest.
Target on the 2-core reference machine: each arm x seed at least 3x faster than before the speed
work (benchmarks/README.md has the figures), with bookkeeping (store appends, flushes, batching)
under 2% of wall time. The SFT policy is loaded from the cache (trained first if absent; that
time is reported separately).

`--threads` sets torch's intra-op threads (default 1: the ops are small, and on a shared machine
a second OpenMP thread mostly spins). The process's CPU seconds are printed too: on a machine
other jobs are loading, CPU time per episode is the steadier figure to compare.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import functools
import operator

import torch
from rich.console import Console
from rich.table import Table

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed.cli import run_command as run
from testbed.runtimes import loop
from testbed.scenario.schema import load_scenario


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="scenarios/style_shift.yaml")
    parser.add_argument("--arm", help="arm name (default: the first)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    scenario = load_scenario(args.scenario, args.overrides)
    names = [a.name for a in scenario.arms]
    arm = args.arm or names[0]
    if arm not in names:
        parser.error(f"no arm {arm!r} in {args.scenario} (arms: {', '.join(names)})")
    keep = names.index(arm)
    # one arm x seed in this process (no Ray tasks), so its CPU time is this process's
    overrides = [
        *args.overrides,
        f"seeds=[{scenario.seeds[0]}]",
        f"arms=[{json.dumps(scenario.arms[keep].model_dump())}]",
        "runtime.parallel_arms=false",
    ]

    with tempfile.TemporaryDirectory() as out:
        arm_cpu = []
        run_arm = loop.run_arm

        def timed_run_arm(*a, **kw):  # CPU seconds of the arm alone, not SFT loading or the report
            before = cpu_seconds()
            totals = run_arm(*a, **kw)
            arm_cpu.append(cpu_seconds() - before)
            return totals

        loop.run_arm = timed_run_arm  # testbed.cli.run_command looks it up in testbed.runtimes.loop when an arm starts
        start = time.perf_counter()
        code = run.main(
            [args.scenario, "--out", out, *functools.reduce(operator.iadd, (["--set", o] for o in overrides), [])]
        )
        total = time.perf_counter() - start
        if code != 0:
            return code
        run_dir = next(Path(out).iterdir())
        manifest = json.loads((run_dir / "manifest.json").read_text())

    totals = next(iter(manifest["arms"][arm].values()))
    wall = totals["wall_s"]
    table = Table(title=f"{arm} on {args.scenario}: {totals['episodes']} episodes, {totals['updates']} updates")
    table.add_column("part")
    table.add_column("seconds", justify="right")
    table.add_column("share of wall", justify="right")
    for part in ("generation", "judging", "training", "eval", "bookkeeping"):
        seconds = totals["time_s"].get(part, 0.0)
        table.add_row(part, f"{seconds:.2f}", f"{seconds / wall:.1%}")
    other = wall - sum(totals["time_s"].values())
    table.add_row("other (loop, progress bar)", f"{other:.2f}", f"{other / wall:.1%}")
    console = Console()
    console.print(table)
    console.print(
        f"arm wall time {wall:.1f} s, {totals['episodes_per_s']:.1f} episodes/s "
        f"(process total {total:.1f} s; SFT {manifest['sft'].get('seconds', 'cached')})"
    )
    cpu = sum(arm_cpu)
    if cpu > 0:
        console.print(
            f"arm CPU time {cpu:.1f} s over {args.threads} thread(s): {totals['episodes'] / cpu:.1f} episodes per "
            f"CPU-second (value pretraining included when it was not cached)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
