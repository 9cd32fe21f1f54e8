"""`kill -9` of an FSDP run on Ray mid-run, then `--resume`, with the same and with another number
of learner ranks. Not a unit test (a Ray run takes a minute or two on two cores).

Runs tests/data/golden.yaml's SAO arm (KL reference and critic sharded) on the Ray runtime with
two FSDP2 learner ranks (gloo, float32), a checkpoint after every update (sharded: each rank's
shards with torch.distributed.checkpoint). Kills the driver with SIGKILL once an episodes part is
written after the newest checkpoint (rows the resume must roll back), then resumes the run with
`learner_workers` 2 (as written) or 1 (the run's scenario.yaml edited: `--resume` takes no
`--set`). Checks: every clock value 0..budget-1 judged exactly once, update rows 1..N with no
gap or repeat, the resume started from a checkpoint inside the arm, the checkpoints sharded.

    python benchmarks/fsdp_resume.py [--ranks-after 2 1] [--episodes 96]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.store import read_table  # noqa: E402

SAO = (
    "arms=[{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 32, "
    "value_pretrain_epochs: 1, value_warmup_updates: 1, kl_coef: 0.2}}]"
)


def args_for(episodes: int) -> list[str]:
    sets = [
        "policy.checkpoint=tests/data/golden/policy",
        "runtime.learner_workers=2",
        "runtime.learner_strategy=fsdp",
        "runtime.fsdp.param_dtype=float32",
        f"budget.episodes={episodes}",
        SAO,
        "reliability.checkpoint_every=1",
        "output.flush_rows=16",
        "output.flush_seconds=600",
        f"eval.every={episodes}",
    ]
    return ["tests/data/golden.yaml", "--runtime", "ray", "--no-report", *[x for s in sets for x in ("--set", s)]]


def newest(run_dir: Path, pattern: str) -> float:
    return max((p.stat().st_mtime for p in run_dir.glob(pattern)), default=0.0)


def mid_run_checkpoint(run_dir: Path) -> float:
    """The newest checkpoint written after two updates or more (mtime), 0 if none yet."""
    files = [p for p in run_dir.glob("checkpoints/*/u*.pt") if int(p.stem[1:]) >= 2]
    return max((p.stat().st_mtime for p in files), default=0.0)


def kill_mid_run(run_dir: Path, argv: list[str]) -> float:
    """Start the run, SIGKILL it once rows exist after a checkpoint inside the arm (two updates
    in or more); seconds it ran."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.run", *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while proc.poll() is None:
        checkpoints = mid_run_checkpoint(run_dir)
        if checkpoints and newest(run_dir, "episodes.parquet/part-*.parquet") > checkpoints:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        raise SystemExit(f"the run ended ({proc.returncode}) before it could be killed")
    return time.monotonic() - start


def check(run_dir: Path, budget: int) -> dict:
    episodes = read_table(run_dir, "episodes")
    ts = sorted(episodes.loc[episodes["judge_error"].isna(), "t"].tolist())
    updates = read_table(run_dir, "updates")["update"].tolist()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    sharded = sorted(p.name for p in (run_dir / "checkpoints" / "sao-seed0").glob("*.dcp"))
    return {
        "clock_contiguous_no_duplicate": ts == list(range(budget)),
        "update_rows_1_to_n": updates == list(range(1, len(updates) + 1)) and bool(updates),
        "updates": len(updates),
        "status": manifest["status"],
        "resumed_from": [r["checkpoint"] for r in manifest["resumes"]],
        "discarded_parts": [r["discarded_parts"] for r in manifest["resumes"]],
        "sharded_checkpoints": sharded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks-after", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--episodes", type=int, default=96)
    opts = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="fsdp-resume-"))
    os.environ.setdefault("TESTBED_NUMERICS", "portable")
    for ranks in opts.ranks_after:
        run_dir = out / f"killed-{ranks}"
        ran = kill_mid_run(run_dir, [*args_for(opts.episodes), "--out", str(out), "--run-name", run_dir.name])
        scenario = run_dir / "scenario.yaml"
        data = yaml.safe_load(scenario.read_text())
        data["runtime"]["learner_workers"] = ranks
        scenario.write_text(yaml.safe_dump(data, sort_keys=False))
        start = time.monotonic()
        resumed = subprocess.run(
            [sys.executable, "-m", "testbed.run", "--resume", str(run_dir), "--no-report"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if resumed.returncode:
            raise SystemExit(resumed.stderr[-3000:])
        result = {
            "ranks": f"2 -> {ranks}",
            "killed_after_s": round(ran, 1),
            "resume_s": round(time.monotonic() - start, 1),
        }
        print(json.dumps({**result, **check(run_dir, opts.episodes)}), flush=True)


if __name__ == "__main__":
    main()
