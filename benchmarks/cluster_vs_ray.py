"""The simulated cluster against the Ray runtime. Run the Ray runtime (2 rollout actors, one
learner, `max_staleness` 2) through the real CLI and time every round (in its actor: weights
loaded, episodes run) and every update (started -> its result in the driver -> weights published). Feed those
times to the simulated runtime with the Ray runtime's shape and protocol, and compare the
staleness histograms of the trained episodes (chi-square test of homogeneity). Not a unit test.

    python benchmarks/cluster_vs_ray.py [--budget 640] [--seeds 0 1] [--set eval.every=64]

The shape and protocol: 2 actors = 2 x 16 slots, issued as rounds of 16 (`issue_size`: one batch,
one latency draw, queued together); Ray's issue gate = `pace`, its queue limit; and its held-out
evaluations wait for the update in progress and the next whole batch (`evaluation: drain`).
The times fed, twice: the medians alone (a round's seconds, an update's, the publication after it),
then with the spreads too (log-normal sigmas from the interquartile ranges of the log seconds, as
independent draws per round and per update). Medians and quartiles keep the start-up (the first
update and each actor's first round take seconds: torch warming up in new processes) from swamping
the rest. The test is on updates: a batch is one round, 16 episodes of one version trained
together, so it is one draw; the episode-level test is printed beside it and overstates certainty.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from scipy.stats import chi2_contingency  # noqa: E402

from testbed.cli.run_command import main  # noqa: E402
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


class Timings:
    """The clock at each round and update of a Ray run: wraps RayRunner's own methods (the real
    runtime runs; this only reads the clock around its steps)."""

    def __init__(self) -> None:
        self.rounds: list[float] = []  # a round's seconds in its actor (weights loaded, episodes run)
        self.updates: list[float] = []  # started -> its result (metrics, weights) in the driver
        self.publish: list[float] = []  # the weights put in the object store for the actors
        self.evals: list[float] = []  # an evaluation, the driver blocked
        self.round_spans: list[tuple[float, float]] = []  # (issued, result seen) of each round, as rounds
        self.learner_spans: list[tuple[float, float]] = []  # (started, result seen) of each update

    def install(self) -> None:
        from testbed.runtimes.ray.runtime import RayRunner

        timings, started, issued = self, {}, {}
        finish_gen, start_up, publish = RayRunner.finish_generation, RayRunner.start_update, RayRunner.publish
        evaluate, submit = RayRunner.evaluate_if_due, RayRunner.submit_generation

        def submit_generation(self: Any, index: int, starts: list) -> Any:
            ref = submit(self, index, starts)
            issued[ref] = time.perf_counter()
            return ref

        def finish_generation(self: Any, ref: Any) -> None:
            before, seen = self.busy["rollout"], time.perf_counter()  # the runtime adds its actor's seconds
            finish_gen(self, ref)
            if self.busy["rollout"] > before:
                timings.rounds.append(self.busy["rollout"] - before)
                timings.round_spans.append((issued.pop(ref), seen))

        def start_update(self: Any) -> None:
            had = self.update_ref
            start_up(self)
            if had is None and self.update_ref is not None:
                started["at"] = time.perf_counter()

        def publish_(self: Any, policy_state: dict, version: int) -> None:
            got = time.perf_counter()  # finish_update has the update's result: publish it
            publish(self, policy_state, version)
            if "at" in started:
                timings.learner_spans.append((started["at"], got))
                timings.updates.append(got - started.pop("at"))
                timings.publish.append(time.perf_counter() - got)

        def evaluate_if_due(self: Any, t: int | None = None) -> None:
            begun = time.perf_counter()
            evaluate(self, t)
            timings.evals.append(time.perf_counter() - begun)

        RayRunner.submit_generation = submit_generation  # type: ignore[method-assign]
        RayRunner.finish_generation = finish_generation  # type: ignore[method-assign]
        RayRunner.start_update = start_update  # type: ignore[method-assign]
        RayRunner.publish = publish_  # type: ignore[method-assign]
        RayRunner.evaluate_if_due = evaluate_if_due  # type: ignore[method-assign]


def overlap(span: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """The share of `span` during which any of `others` (disjoint among themselves) ran."""
    a, b = span
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in others if (x, y) != span) / max(b - a, 1e-9)


def contention(t: Timings) -> str:
    """A round's seconds against what else ran on the machine meanwhile: the learner (over half of
    the round), another round (any part of it). Independent latencies would not move with these."""
    rows = [
        (sec, overlap(span, t.learner_spans) > 0.5, overlap(span, t.round_spans) > 0)
        for sec, span in zip(t.rounds, t.round_spans)
    ]
    out = []
    for name, k in (("the learner busy", 1), ("another round running", 2)):
        for flag in (True, False):
            mine = [r[0] for r in rows if r[k] == flag]
            out.append(
                f"{name if flag else 'not'}: n={len(mine)}, median {np.median(mine) if mine else float('nan'):.3f} s"
            )
    return "; ".join(out)


def lognormal_fit(seconds: list[float]) -> tuple[float, float]:
    """(median, sigma): sigma from the interquartile range of the logs (robust to the start-up)."""
    q1, median, q3 = np.percentile(seconds, [25, 50, 75])
    return float(median), float((np.log(q3) - np.log(q1)) / 1.349)


def histogram(run_dir: Path) -> dict[int, int]:
    episodes = read_table(run_dir, "episodes")
    trained = episodes[episodes["trained"].astype(bool)]
    return {int(k): int(v) for k, v in trained["staleness"].value_counts().sort_index().items()}


def batch_histogram(run_dir: Path) -> dict[int, int]:
    """Updates by the staleness of their batch. A batch here is one round (16 episodes of one
    version, trained together), so its episodes are one draw, not 16: the update is the unit
    of the test; the episodes' test counts each 16 times and overstates its certainty."""
    stale = read_table(run_dir, "updates")["staleness_mean"]
    if (stale != stale.round()).any():
        raise SystemExit(f"{run_dir}: a batch mixes versions; the per-update test does not apply")
    return {int(k): int(v) for k, v in stale.round().astype(int).value_counts().sort_index().items()}


def dropped(run_dir: Path) -> int:
    return len(read_table(run_dir, "dropped"))


def simulation(args: argparse.Namespace, t: Timings, spreads: bool) -> str:
    round_s, round_spread = lognormal_fit(t.rounds)
    update_s, update_spread = lognormal_fit(t.updates)
    sync_s = float(np.median(t.publish))
    if not spreads:
        round_spread = update_spread = 0.0
    return (
        f"runtime.simulation={{rollout_slots: {2 * EPU}, issue_size: {EPU}, staleness_policy: pace, "
        f"evaluation: {args.evaluation}, latency: {{per_token_s: 0, per_turn_s: {round_s:.4f}, "
        f"spread: {round_spread:.3f}, judge_s: 0}}, learner: {{fixed_s: {update_s:.4f}, per_token_s: 0, "
        f"sync_s: {sync_s:.4f}, spread: {update_spread:.3f}}}}}"
    )


def compare(unit: str, ray_h: dict[int, int], sim_h: dict[int, int]) -> None:
    keys = sorted(set(ray_h) | set(sim_h))
    print(f"  staleness of trained {unit}: " + "  ".join(f"{k:>6}" for k in keys))
    for name, h in (("ray", ray_h), ("simulated", sim_h)):
        total = sum(h.values())
        print(f"    {name:<10} " + "  ".join(f"{h.get(k, 0) / total:6.3f}" for k in keys) + f"   (n={total})")
    table = np.array([[h.get(k, 0) for k in keys] for h in (ray_h, sim_h)])
    print(f"    chi-square test of homogeneity: p = {chi2_contingency(table)[1]:.3g}")


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=640)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--set", dest="sets", action="append", default=[], help="a scenario override for both runs")
    parser.add_argument(
        "--evaluation",
        choices=["drain", "aside"],
        default="drain",
        help="the simulation's evaluations (drain: the Ray runtime's loop; aside: to show what it changes)",
    )
    parser.add_argument("--dump", type=Path, help="write the Ray run's timings here (JSON)")
    args = parser.parse_args(argv)
    import ray

    from testbed.runtimes.ray.cluster import start_local

    timings = Timings()
    timings.install()
    with tempfile.TemporaryDirectory() as tmp:
        start_local(num_cpus=2, log_to_driver=False)
        try:
            sets = ("runtime.kind=ray", "runtime.rollout_workers=2", *args.sets)
            ray_dir = run(Path(tmp), "ray", args.budget, args.seeds, *sets)
        finally:
            ray.shutdown()
        if args.dump:
            args.dump.write_text(json.dumps(vars(timings)))
        ray_b, ray_h, ray_d = batch_histogram(ray_dir), histogram(ray_dir), dropped(ray_dir)
        sims = {}
        for spreads in (False, True):
            sim = simulation(args, timings, spreads)
            sim_dir = run(
                Path(tmp), f"sim{int(spreads)}", args.budget, args.seeds, "runtime.kind=simulated", sim, *args.sets
            )
            sims[spreads] = (sim, batch_histogram(sim_dir), histogram(sim_dir), dropped(sim_dir))
    for what, seconds in (("rounds of 16 (in the actor)", timings.rounds), ("updates", timings.updates)):
        p10, p50, p90 = np.percentile(seconds, [10, 50, 90])
        print(f"Ray {what}: n={len(seconds)}, p10/50/90 = {p10:.3f}/{p50:.3f}/{p90:.3f} s")
    print(f"Ray round seconds against what else ran: {contention(timings)}")
    print(f"Ray evaluations: n={len(timings.evals)}, median {np.median(timings.evals):.3f} s; dropped episodes {ray_d}")
    for spreads, (sim, sim_b, sim_h, sim_d) in sims.items():
        fed = "medians and the measured spreads (independent draws)" if spreads else "the measured medians"
        print(f"\nsimulated, fed {fed}; dropped episodes {sim_d}\n  {sim}")
        compare("updates (the sampling unit)", ray_b, sim_b)
        compare("episodes (16 per update: overstates the certainty)", ray_h, sim_h)
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
