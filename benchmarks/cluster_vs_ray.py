"""The simulated cluster against the Ray runtime: run the Ray runtime (2 rollout actors, one
learner, `max_staleness` 2) through the real CLI, read the times it measured (a round's generation,
an update) from its manifest, feed them to the simulated runtime with the same shape (2 actors =
2 x 16 slots issued as rounds of 16 that complete together, `issue_size`; Ray's issue gate = `pace`), and compare the staleness
histograms of the trained episodes (chi-square test of homogeneity). Not a unit test.

    python benchmarks/cluster_vs_ray.py [--budget 640] [--seeds 0 1] [--spread 0.1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from scipy.stats import chi2_contingency  # noqa: E402

from testbed.cli.run import main  # noqa: E402
from testbed.store import read_table  # noqa: E402

SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
EPU = 16


def run(out: Path, name: str, budget: int, seeds: list[int], *sets: str) -> Path:
    arms = f"arms=[{{name: rm, type: running_mean, args: {{window: 32, episodes_per_update: {EPU}}}}}]"
    args = [SCENARIO, "--out", str(out), "--run-name", name, "--no-report", "--set", arms]
    args += ["--set", f"budget.episodes={budget}", "--set", f"seeds={seeds}", "--set", "runtime.max_staleness=2"]
    for s in sets:
        args += ["--set", s]
    if main(args) != 0:
        raise SystemExit(f"{name} failed")
    return out / name


def measured_times(run_dir: Path) -> tuple[float, float]:
    """(seconds per generated round, seconds per update) from the Ray runtime's totals."""
    rounds = update_s = rollout_s = updates = 0.0
    for totals in json.loads((run_dir / "manifest.json").read_text())["arms"]["rm"].values():
        rt, wall = totals["runtime"], totals["wall_s"]
        rollout_s += (1 - rt["rollout_idle_share"]) * wall * rt["rollout_workers"]
        update_s += (1 - rt["learner_idle_share"]) * wall
        rounds += totals["episodes"] / EPU
        updates += totals["updates"]
    return rollout_s / rounds, update_s / updates


def histogram(run_dir: Path) -> dict[int, int]:
    episodes = read_table(run_dir, "episodes")
    trained = episodes[episodes["trained"].astype(bool)]
    return {int(k): int(v) for k, v in trained["staleness"].value_counts().sort_index().items()}


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=640)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="log-normal sigma of each simulated episode's time (0: a round completes together)",
    )
    args = parser.parse_args(argv)
    import ray

    from testbed.runtimes.ray.cluster import start_local

    with tempfile.TemporaryDirectory() as tmp:
        start_local(num_cpus=2, log_to_driver=False)
        try:
            ray_dir = run(Path(tmp), "ray", args.budget, args.seeds, "runtime.kind=ray", "runtime.rollout_workers=2")
        finally:
            ray.shutdown()
        round_s, update_s = measured_times(ray_dir)
        sim = (
            f"runtime.simulation={{rollout_slots: {2 * EPU}, issue_size: {EPU}, staleness_policy: pace, "
            "latency: {per_token_s: 0, "
            f"per_turn_s: {round_s:.4f}, spread: {args.spread}, judge_s: 0}}, learner: {{fixed_s: {update_s:.4f}, "
            "per_token_s: 0, sync_s: 0}}"
        )
        sim_dir = run(Path(tmp), "sim", args.budget, args.seeds, "runtime.kind=simulated", sim)
        ray_h, sim_h = histogram(ray_dir), histogram(sim_dir)
    keys = sorted(set(ray_h) | set(sim_h))
    table = np.array([[ray_h.get(k, 0) for k in keys], [sim_h.get(k, 0) for k in keys]])
    _, p, _, _ = chi2_contingency(table)
    print(f"measured on Ray: {round_s:.3f} s per round of {EPU}, {update_s:.3f} s per update")
    print("staleness  " + "  ".join(f"{k:>6}" for k in keys))
    for name, h in (("ray", ray_h), ("simulated", sim_h)):
        total = sum(h.values())
        print(f"{name:<10} " + "  ".join(f"{h.get(k, 0) / total:6.3f}" for k in keys) + f"   (n={total})")
    print(f"chi-square test of homogeneity: p = {p:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
