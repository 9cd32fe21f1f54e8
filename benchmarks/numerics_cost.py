"""What portable numerics cost against native ones: SFT and each arm x seed, in one run.

    python benchmarks/numerics_cost.py [SCENARIO] [--seed N] [--set key=value ...]

For each mode (testbed/cpu_numerics.py), a chain of `benchmarks/throughput.py --arm ARM` processes
with TESTBED_NUMERICS=mode and a fresh TESTBED_CACHE: the first trains the seed's SFT policy
(timed apart), then every arm of the scenario runs one seed. The two chains run side by side, one
per core, so that both see the same machine load; each process uses one torch thread. Prints a
table of wall seconds and portable/native ratios, and writes it as JSON (--json PATH).
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("native", "portable")


def arm_names(scenario: str, overrides: list[str]) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from testbed.scenario.schema import load_scenario

    return [arm.name for arm in load_scenario(scenario, overrides).arms]


def chain(mode: str, scenario: str, arms: list[str], overrides: list[str], results: dict) -> None:
    """Every arm in turn under `mode`; the first process also trains the SFT policy."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TESTBED_NUMERICS": mode, "TESTBED_CACHE": cache, "OMP_NUM_THREADS": "1"}
        for key in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"):  # testbed sets them per mode
            env.pop(key, None)
        for arm in arms:
            out = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "benchmarks/throughput.py"),
                    scenario,
                    "--arm",
                    arm,
                    *functools.reduce(operator.iadd, (["--set", o] for o in [*overrides, f"numerics={mode}"]), []),
                ],
                env=env,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if out.returncode != 0:  # a thread's exception: printed here, and the row is missing below
                print(f"{mode} {arm} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}", flush=True)
                return
            text = out.stdout + out.stderr
            wall = float(re.search(r"arm wall time ([\d.]+) s", text).group(1))
            results[(mode, arm)] = wall
            sft = re.search(r"SFT ([\d.]+)\)", text)
            if sft:
                results[(mode, "SFT")] = float(sft.group(1))
            print(f"{mode:9s} {arm:14s} {wall:7.1f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/style_shift.yaml")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()
    overrides = [*args.overrides, f"seeds=[{args.seed}]"]
    arms = arm_names(args.scenario, overrides)
    results: dict = {}
    threads = [threading.Thread(target=chain, args=(mode, args.scenario, arms, overrides, results)) for mode in MODES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = []
    print(f"\n{'part':14s} {'native s':>9s} {'portable s':>11s} {'ratio':>6s}")
    for part in ["SFT", *arms]:
        native, portable = results.get(("native", part)), results.get(("portable", part))
        if native is None or portable is None:
            continue
        rows.append({"part": part, "native_s": native, "portable_s": portable, "ratio": round(portable / native, 3)})
        print(f"{part:14s} {native:9.1f} {portable:11.1f} {portable / native:6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"scenario": args.scenario, "seed": args.seed, "rows": rows}, indent=1))
    return 0 if len(rows) == len(arms) + 1 else 1


if __name__ == "__main__":
    sys.exit(main())
