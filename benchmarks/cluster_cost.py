"""What the simulated cluster costs in real time against the synchronous runtime on the same
episodes: `scenarios/cluster_shift.yaml`'s running mean (256 slots, batches of 128), one seed, the
drift schedule in episodes (the synchronous runtime refuses one in simulated seconds), run through
the CLI in a fresh process per run, the two kinds interleaved. Reports each run's CPU-seconds (the
process's user + system: the figure that load from other processes does not move much), wall
seconds, the manifest's timed parts, and the untimed rest of the arm's wall time (for the
simulated runtime: its own bookkeeping, the event loop). Not a unit test.

    python benchmarks/cluster_cost.py [--budget 1280] [--repeats 2] [--profile DIR] [--small-batch N]

`--profile DIR` writes a cProfile of each run, timed in CPU-seconds (DIR/<kind>-<i>.prof).
`--small-batch N` adds a third kind, `sync_small`: the synchronous runtime generating in batches
of N (`engine.args.max_batch`), about the simulated run's mean batch: what small batches alone
cost, apart from everything else the simulation does (docs/simulated.md, cost).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "scenarios" / "cluster_shift.yaml")
ARM = "running_mean"
PARTS = ("generation", "judging", "training", "eval", "bookkeeping")


def cli_args(kind: str, budget: int, out: Path, name: str, small_batch: int = 0) -> list[str]:
    sets = [
        f"arms=[{{name: {ARM}, type: running_mean, args: {{window: 128, episodes_per_update: 128, lr: 2.0e-4, "
        "kl_coef: 0.2}}]",
        "seeds=[0]",
        f"budget.episodes={budget}",
        "schedule.clock=episodes",
        "schedule.horizon_s=null",
        f"runtime.kind={'sync' if kind == 'sync_small' else kind}",
        *([f"engine.args.max_batch={small_batch}"] if kind == "sync_small" else []),
    ]
    return [SCENARIO, "--out", str(out), "--run-name", name, "--no-report", *[a for s in sets for a in ("--set", s)]]


def child(args: list[str], profile: str | None) -> int:
    """One run in this process (under cProfile in CPU-seconds with a profile path)."""
    sys.path.insert(0, str(ROOT))
    from testbed.cli.run_command import main

    if not profile:
        return main(args)
    import cProfile

    prof = cProfile.Profile(time.process_time)
    try:
        return prof.runcall(main, args)
    finally:
        prof.dump_stats(profile)


def one(kind: str, budget: int, out: Path, name: str, profile: Path | None, small_batch: int = 0) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    cmd = [sys.executable, __file__, "--child", *(["--profile-to", str(profile)] if profile else [])]
    subprocess.run([*cmd, "--", *cli_args(kind, budget, out, name, small_batch)], check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    totals = json.loads((out / name / "manifest.json").read_text())["arms"][ARM]["0"]
    parts = {k: totals["time_s"].get(k, 0.0) for k in PARTS}
    return {
        "kind": kind,
        "cpu_s": cpu,
        "wall_s": wall,
        "arm_wall_s": totals["wall_s"],
        "untimed_s": totals["wall_s"] - sum(parts.values()),
        "updates": totals["updates"],
        **parts,
    }


def main_(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        profile = argv[2] if argv[1] == "--profile-to" else None
        return child(argv[argv.index("--") + 1 :], profile)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--profile", type=Path, help="write a CPU-time cProfile of each run here")
    parser.add_argument("--small-batch", type=int, default=0, help="also run the synchronous runtime at this batch")
    args = parser.parse_args(argv)
    kinds = ["sync", "simulated", *(["sync_small"] if args.small_batch else [])]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:  # each kind first in turn
                profile = args.profile / f"{kind}-{i}.prof" if args.profile else None
                rows.append(one(kind, args.budget, Path(tmp), f"{kind}-{i}", profile, args.small_batch))
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in rows[-1].items()}))
    print(f"\n{args.budget} episodes, {ARM}, seed 0; means over {args.repeats} runs of each (seconds)")
    keys = ("cpu_s", "wall_s", "arm_wall_s", *PARTS, "untimed_s")
    print("kind        " + "  ".join(f"{k:>11}" for k in keys))
    means = {}
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        means[kind] = {k: sum(r[k] for r in mine) / len(mine) for k in keys}
        print(f"{kind:<11} " + "  ".join(f"{means[kind][k]:11.2f}" for k in keys))
    sim, sync = means["simulated"], means["sync"]
    print(f"simulated / sync CPU-seconds: {sim['cpu_s'] / sync['cpu_s']:.3f}")
    if args.small_batch:
        small = means["sync_small"]
        print(f"sync at batches of {args.small_batch} / sync CPU-seconds: {small['cpu_s'] / sync['cpu_s']:.3f}")
        print(f"simulated / sync at batches of {args.small_batch} CPU-seconds: {sim['cpu_s'] / small['cpu_s']:.3f}")
    print(f"simulated untimed (its event loop) / its arm's wall time: {sim['untimed_s'] / sim['arm_wall_s']:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
