"""The fault drill on a cluster the run did not start: a two-node Ray cluster (`ray start --head`,
then `ray start --address`, token authentication; tests/separate_cluster.py), the asynchronous Ray
runtime pointed at it through `runtime.address`, and from ANOTHER driver connected to the same
cluster: a rollout actor killed while the run goes on, then the learner killed once a checkpoint
exists. The run must stop with exit 3 and a checkpoint, `--resume` must finish it, and the clock
must be contiguous with nothing lost or judged twice.

    python benchmarks/ray_fault_drill.py [--episodes 1600] [--nodes 2]

Prints what happened at each step and a JSON summary; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.store import read_table  # noqa: E402
from tests.separate_cluster import separate_cluster  # noqa: E402

# The other driver: connects to the cluster once; finds the arm's first rollout actor (in any job's
# namespace), lets it work a little and kills it without restart; then waits for a checkpoint at
# least two updates further on and kills the learner the same way. Prints each name.
KILLER = """
import os, pathlib, sys, time, ray
checkpoints = pathlib.Path(sys.argv[1])
ray.init(address=os.environ["DRILL_ADDRESS"], log_to_driver=False)

def newest():
    return max((int(p.stem[1:]) for p in checkpoints.glob("u*.pt")), default=-1)

print("connected", round(time.time() - float(sys.argv[2]), 1), newest(), flush=True)

def kill(suffix, ready):
    deadline = time.time() + 600
    while time.time() < deadline:
        named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].endswith(suffix)]
        if named and ready():
            ray.kill(ray.get_actor(named[0]["name"], namespace=named[0]["namespace"]), no_restart=True)
            print(named[0]["name"], "at", round(time.time() - float(sys.argv[2]), 1), "s, newest checkpoint", newest(), flush=True)
            return
        time.sleep(0.2)

kill("-rm-seed0-rollout0-r0", lambda: newest() >= 1)
after = newest()
kill("-rm-seed0-learner0", lambda: newest() >= after + 2)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1600)
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="drill"))
    summary: dict = {"episodes": args.episodes, "nodes": args.nodes}
    with separate_cluster(nodes=args.nodes, cpus_per_node=2) as cluster:
        summary["alive_nodes"] = cluster.alive_nodes()
        env = {**os.environ, **cluster.env, "DRILL_ADDRESS": cluster.address}
        run = [
            sys.executable, "-m", "testbed.run", "tests/data/tiny.yaml", "--out", str(out), "--run-name", "drill",
            "--no-report", "--set", "seeds=[0]", "--set", f"budget.episodes={args.episodes}", "--set", "eval.every=64",
            "--set", "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}]",
            "--runtime", "ray", "--set", "runtime.rollout_workers=2", "--set", "runtime.max_staleness=1",
            "--set", "reliability.checkpoint_every=2", "--set", f"runtime.address={cluster.address}",
        ]  # fmt: skip
        started = time.time()
        driver = subprocess.Popen(run, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        checkpoints = out / "drill" / "checkpoints" / "rm-seed0"
        killer = subprocess.Popen(
            [sys.executable, "-c", KILLER, str(checkpoints), str(started)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        stdout, stderr = driver.communicate(timeout=900)
        if killer.poll() is None:  # the run ended before both kills: the drill did not happen
            killer.kill()
        killed_out, killed_err = killer.communicate()
        summary["other_driver"] = killed_out.strip().splitlines() or killed_err[-500:]
        summary["first_exit"] = driver.returncode
        summary["first_stop"] = next((line for line in stderr.splitlines() if "stopped" in line), "")
        summary["first_run_actor_restarts"] = (stdout + stderr).count("restarting it")
        if driver.returncode != 3:
            summary["first_error"] = stderr[-3000:]
        resumed = subprocess.run(
            [sys.executable, "-m", "testbed.run", "--resume", str(out / "drill")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        summary["resume_exit"] = resumed.returncode
        summary["wall_s"] = round(time.time() - started, 1)
    episodes = read_table(out / "drill", "episodes")
    judged = episodes[episodes["judge_error"].isna()]
    manifest = json.loads((out / "drill" / "manifest.json").read_text())
    summary.update(
        clock_contiguous=sorted(judged["t"]) == list(range(args.episodes)),
        duplicated_clock_values=int(judged.duplicated(["arm", "t"]).sum()),
        resumed_run_actor_restarts=manifest["arms"]["rm"]["0"]["runtime"]["actor_restarts"],
        resumed_from=[r["checkpoint"] for r in manifest.get("resumes", [])],
        status=manifest["status"],
        update_rows=sorted(read_table(out / "drill", "updates")["update"].astype(int).tolist()),
    )
    print(json.dumps(summary, indent=1))
    ok = (
        summary["first_exit"] == 3
        and summary["resume_exit"] == 0
        and summary["clock_contiguous"]
        and summary["duplicated_clock_values"] == 0
        and summary["status"] == "done"
        and summary["first_run_actor_restarts"] >= 1
    )
    if not ok:
        print(resumed.stderr[-3000:], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
