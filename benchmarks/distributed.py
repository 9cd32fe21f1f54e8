"""Episodes per second of the runtimes on this machine, through the real CLI:

    the synchronous loop; Ray with 1 and with 2 rollout actors (max_staleness 1 for 2);
    arms x seeds one after another vs side by side (runtime.parallel_arms)

and the rollout actors' and the learner's idle shares (from the manifest). Not a unit test.

    python benchmarks/distributed.py [--budget 960] [--arm sao] [--jobs 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.cli.run_command import main  # noqa: E402

SCENARIO = str(ROOT / "scenarios" / "style_shift.yaml")


def timed(out: Path, name: str, *sets: str) -> tuple[float, dict]:
    started = time.perf_counter()
    args = [SCENARIO, "--out", str(out), "--run-name", name]
    for s in sets:
        args += ["--set", s]
    if main(args) != 0:
        raise SystemExit(f"{name}: the run failed")
    wall = time.perf_counter() - started
    return wall, json.loads((out / name / "manifest.json").read_text())


def main_benchmark() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=960, help="episodes per arm x seed")
    parser.add_argument(
        "--arm", default="sao", choices=["sao", "running_mean", "grpo"], help="the arm for the runtime rows"
    )
    parser.add_argument(
        "--jobs", type=int, default=4, help="arm x seed jobs for the parallel-arms rows (seeds of the three arms)"
    )
    args = parser.parse_args()
    common = [f"budget.episodes={args.budget}", "eval.every=100000", "runtime.torch_threads=1"]
    one_arm = f"arms=[{{name: x, type: {args.arm}, args: {{}}}}]"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        rows = []
        for label, sets in [
            ("sync loop", [one_arm, "seeds=[0]"]),
            ("ray, 1 rollout actor, staleness 0", [one_arm, "seeds=[0]", "runtime.kind=ray"]),
            (
                "ray, 2 rollout actors, staleness 1",
                [one_arm, "seeds=[0]", "runtime.kind=ray", "runtime.rollout_workers=2", "runtime.max_staleness=1"],
            ),
        ]:
            wall, manifest = timed(out, label.replace(" ", "_").replace(",", ""), *common, *sets)
            totals = manifest["arms"]["x"]["0"]
            rt = totals.get("runtime", {})
            rows.append(
                (
                    label,
                    args.budget / wall,
                    totals["episodes_per_s"],
                    rt.get("rollout_idle_share"),
                    rt.get("learner_idle_share"),
                )
            )
        seeds = list(range(max(1, args.jobs // 2)))
        jobs = [f"seeds={seeds}", "arms=[{name: rm, type: running_mean, args: {}}, {name: grpo, type: grpo, args: {}}]"]
        seq, _ = timed(out, "sequential", *common, *jobs)
        par, _ = timed(out, "parallel", *common, *jobs, "runtime.parallel_arms=true")
        n = 2 * len(seeds)
        rows.append((f"{n} arm x seed jobs one after another", n * args.budget / seq, None, None, None))
        rows.append((f"{n} arm x seed jobs side by side", n * args.budget / par, None, None, None))
    print(
        f"{'runtime':<42} {'episodes/s (wall)':>18} {'episodes/s (loop)':>18} {'rollout idle':>13} {'learner idle':>13}"
    )
    for label, wall_rate, loop_rate, r_idle, l_idle in rows:
        fmt = lambda v, f: "-" if v is None else f.format(v)  # noqa: E731
        print(
            f"{label:<42} {wall_rate:>18.1f} {fmt(loop_rate, '{:.1f}'):>18} {fmt(r_idle, '{:.2f}'):>13} {fmt(l_idle, '{:.2f}'):>13}"
        )
    print(f"parallel arms speed-up: {seq / par:.2f}x")


if __name__ == "__main__":
    main_benchmark()
