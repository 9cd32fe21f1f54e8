"""The simulated runtime for one arm x seed: the real policy, judge and trainer on a modelled
asynchronous cluster (cluster.py), in one process, deterministic per seed.

The cluster decides when each episode starts, under which published version, when it completes
and when the learner trains it; this runner is its workload: it issues prompts, generates each
episode with the weights of the version it started under (kept by version until no started
episode needs them), judges at completion, and trains. Every row carries simulated seconds:
episodes `sim_start_s`, `sim_done_s`, `sim_judged_s`, `sim_trained_s`; updates `sim_s` (start) and
`sim_published_s`. With `rollout_slots` = one batch, equal latencies and updates that take no
time, it writes the synchronous loop's rows.
"""

from __future__ import annotations

import copy
import resource
import sys
from collections import Counter
from typing import Any

import torch

from testbed import device
from testbed.engines.mismatch import mismatch_probe
from testbed.envs.schedules.sim_time import SimTimeSchedule
from testbed.models import lora
from testbed.models.tokenizer import WordTokenizer
from testbed.runtimes.collect import Round
from testbed.runtimes.reference_policy import timed_reference_rows
from testbed.runtimes.runner import ArmRunner, make_engine, make_trainer, seed_everything
from testbed.runtimes.simulated.cluster import Job, SimulatedCluster
from testbed.scenario.schema import ArmConfig, Scenario
from testbed.types import Trajectory
from testbed.world import prompts


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The published version's weights: a copy, adapters merged (policy.lora)."""
    return {k: v.clone() for k, v in lora.merged_state(module).items()}


def held_bytes(versions: dict[int, dict[str, torch.Tensor]]) -> int:
    """Bytes of the tensors the versions hold, a tensor two versions share counted once (`weights`
    clones, so none is shared: the sum over versions)."""
    held = {t.data_ptr(): t.numel() * t.element_size() for state in versions.values() for t in state.values()}
    return sum(held.values())


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (ru_maxrss: kilobytes on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


class SimRunner(ArmRunner):
    """One arm x seed on the simulated cluster (see the module docstring)."""

    def __init__(
        self, scenario: Scenario, arm: ArmConfig, seed: int, *, base_policy: torch.nn.Module, tokenizer: Any, **kw: Any
    ):
        # a schedule in simulated seconds realises its switches on this arm x seed's own clock
        self.timed: SimTimeSchedule | None = None
        if isinstance(kw["schedule"], SimTimeSchedule):
            kw["schedule"] = self.timed = kw["schedule"].fresh()
        super().__init__(scenario, arm, seed, **kw)
        seed_everything(seed)
        rt = scenario.runtime_for(arm)
        plain = copy.deepcopy(base_policy).to(device.for_this_process(rt.device))
        self.policy = lora.attach(copy.deepcopy(plain), scenario.policy.lora, seed)  # the learner's
        self.trainer = make_trainer(arm, self.policy, tokenizer, scenario, seed)
        self.probe = mismatch_probe(scenario, self.policy, tokenizer, self.trainer)
        # The rollouts' copy, a plain model: loaded with the (merged) weights of whichever version generates next.
        self.engine = self.eval_engine = make_engine(scenario, plain, tokenizer)
        self.versions: dict[int, dict[str, torch.Tensor]] = {0: weights(self.policy)}
        # the version buffer's peak over the run: versions held at once and their bytes (see `hold`)
        self.policy_bytes = held_bytes(self.versions)  # one version: the plain model's weights, adapters merged
        self.buffer_peak = {"versions": 1, "bytes": self.policy_bytes}
        self.loaded = 0  # the version in the engine's copy
        self.specs = {spec.prompt_id: spec for spec in prompts("train")}  # the env's prompts, for requeues
        self.requeued: list[str] = []  # prompt ids of episodes dropped as too stale, issued again first
        self.staleness: Counter = Counter()
        epu, lag = self.trainer.episodes_per_update, self.max_staleness
        # as on Ray: at most runtime.queue_size episodes in flight and queued (default (max_staleness + 2) x batch)
        limit = rt.queue_size or (None if lag is None else (lag + 2) * epu)
        self.cluster = SimulatedCluster(rt.simulation, epu, self.trainer.group_size, lag, seed, queue_limit=limit)

    # -- checkpoints: the cluster and the versions it still needs ---------------------------------

    def checkpoint_extra(self) -> dict[str, Any]:
        return {
            "simulation": {
                "cluster": self.cluster,
                "versions": self.versions,
                "buffer_peak": dict(self.buffer_peak),
                "requeued": self.requeued,
                "staleness": dict(self.staleness),
                "schedule": self.timed.state_dict() if self.timed else None,
            }
        }

    def restore(self, resume: dict[str, Any]) -> None:
        super().restore(resume)
        saved = resume.get("simulation")
        if saved is None:
            raise ValueError("the checkpoint has no simulated cluster: it was not written by runtime.kind simulated")
        self.cluster, self.versions, self.requeued = saved["cluster"], saved["versions"], saved["requeued"]
        self.buffer_peak = saved.get("buffer_peak", self.buffer_peak)  # older checkpoints: from the resume on
        self.hold()
        self.loaded = -1  # the engine's copy holds the starting weights: load the version needed
        self.staleness = Counter(saved["staleness"])
        if self.timed:
            self.timed.load_state_dict(saved["schedule"])

    # -- the workload the cluster runs ------------------------------------------------------------

    def loop(self) -> None:
        self.cluster.run(self)

    def now_is(self, now: float) -> None:
        """Tell a schedule in simulated seconds the time before anything is issued, judged or evaluated."""
        if self.timed:
            self.timed.at(now, self.env.clock)

    def use_version(self, version: int) -> None:
        if self.loaded != version:
            self.engine.load_weights(self.versions[version], version)
            self.loaded = version

    def issue(self, jobs: int, pending: int) -> list[list[Any]]:
        """Starts for up to `jobs` jobs: the prompts of dropped episodes first, then new ones;
        never more episodes than the budget has left once the `pending` ones are judged."""
        self.now_is(self.cluster.now)
        size, left, clock = self.trainer.group_size, self.budget - self.env.clock - pending, self.env.clock + pending
        groups = jobs * (self.cluster.job_size // size)
        starts: list[Any] = []
        again = 0
        while self.requeued and again < groups and len(starts) < left:
            starts += self.env.eval_starts([self.specs[self.requeued.pop(0)]] * size, clock + len(starts))
            starts, again = starts[:left], again + 1
        if again < groups and len(starts) < left:
            with self.timer.part("bookkeeping"):
                starts += self.collector.issue(groups - again, 0, pending + len(starts)).starts
        step = self.cluster.job_size
        return [starts[i : i + step] for i in range(0, len(starts), step)]

    def generate(self, jobs: list[Job], version: int) -> None:
        self.use_version(version)
        starts = [s for job in jobs for s in job.starts]
        with self.timer.part("generation"):
            trajs = self.env.rollout(self.engine, starts)
        for job in jobs:
            job.trajs, trajs = trajs[: len(job.starts)], trajs[len(job.starts) :]

    def arrive(self, jobs: list[Job], now: float) -> None:
        """Judge the jobs complete at `now`; jobs with consecutive group ids in one call, as one round."""
        size = self.trainer.group_size
        chunks: list[list[Job]] = []
        for job in jobs:
            last = chunks[-1][-1] if chunks else None
            if last is not None and job.group == last.group + -(-len(last.starts) // size):
                chunks[-1].append(job)
            else:
                chunks.append([job])
        judged: list[Trajectory] = []
        self.now_is(now)  # judged at their completion: against the target in force then
        with self.timer.part("judging"):
            for chunk in chunks:
                round_ = Round([s for j in chunk for s in j.starts], chunk[0].group, size)
                judged += self.collector.judge(round_, [t for j in chunk for t in j.trajs])
        for job in jobs:
            for traj, done in zip(job.trajs, job.done_s):
                # judged with its job: a GRPO group when its last member completes (its clock t is then)
                traj.sim_times = {"sim_start_s": job.start_s, "sim_done_s": done, "sim_judged_s": now}
        self.record_round(judged)

    def queued(self) -> int:
        return len(self.state.buffer)

    def take(self, version: int, now: float) -> list[Trajectory] | None:
        return self.next_batch()

    def requeue(self, dropped: list[Trajectory]) -> None:
        """Issue the prompt of each dropped episode (each dropped group) again, before new ones."""
        seen: set[int] = set()
        for traj in dropped:
            if traj.group_id not in seen:
                seen.add(traj.group_id)
                self.requeued.append(traj.prompt_id)

    def train(self, batch: list[Trajectory], now: float, done_s: float) -> int:
        stale = [self.trainer.version - t.policy_version for t in batch]
        self.staleness.update(stale)
        for traj in batch:
            traj.sim_times["sim_trained_s"] = now
        self.record_trained(batch)
        mismatch = self.probe(batch, self.trainer.version) if self.probe is not None else {}
        with self.timer.part("training"):
            metrics = self.trainer.update(batch)
        self.versions[self.trainer.version] = weights(self.policy)
        self.hold()
        self.cluster.publishing = self.trainer.version  # before record_update: a checkpoint there holds it
        self.record_update(
            {
                **metrics,
                **mismatch,
                "staleness_mean": sum(stale) / len(stale),
                "staleness_max": max(stale),
                "sim_s": now,
                "sim_published_s": done_s,
            }
        )
        return self.trainer.version

    def publish(self, version: int, now: float) -> None:
        """Forget the versions no started, ungenerated episode needs (the published one stays)."""
        keep = min([version, *(job.version for job in self.cluster.pending)])
        self.versions = {v: w for v, w in self.versions.items() if v >= keep}

    def hold(self) -> None:
        """Update the version buffer's peak: only versions added raise it (`publish` only removes)."""
        self.buffer_peak["versions"] = max(self.buffer_peak["versions"], len(self.versions))
        self.buffer_peak["bytes"] = max(self.buffer_peak["bytes"], held_bytes(self.versions))

    def between_events(self, now: float) -> None:
        self.now_is(now)
        if self.env.clock < self.budget:  # the last evaluation is run()'s, at the budget
            self.evaluate_if_due()
        self.show_progress()

    def eval_due(self) -> bool:
        return self.state.next_eval <= self.env.clock < self.budget

    def evaluate_if_due(self, t: int | None = None) -> None:
        """Held-out evaluation of the published version (what the rollouts have)."""
        if t is None and self.env.clock < self.state.next_eval:
            return
        self.use_version(self.cluster.version)
        super().evaluate_if_due(t)

    def totals(self) -> dict[str, Any]:
        totals = super().totals()
        totals["runtime"] = {
            "kind": "simulated",
            "rollout_slots": self.cluster.cfg.rollout_slots,
            "staleness_policy": self.cluster.cfg.staleness_policy,
            "max_staleness": self.max_staleness,
            "staleness_histogram": {str(k): v for k, v in sorted(self.staleness.items())},
            **self.cluster.summary(),
            # the versions held for started, ungenerated episodes (docs/simulated.md, cost)
            "version_buffer_peak_versions": self.buffer_peak["versions"],
            "version_buffer_peak_bytes": self.buffer_peak["bytes"],
            "policy_bytes": self.policy_bytes,
            "process_peak_rss_bytes": peak_rss_bytes(),  # the whole process's so far (arms before this one too)
        }
        if self.timed:  # where this arm x seed met each switch in seconds (analysis/cluster.py reads it)
            totals["switch_seconds"] = self.timed.switch_seconds()
            totals["switch_points"] = [t for t in self.timed.switch_points() if t < self.env.clock]
        return totals

    def evaluate_reference(self, starting_engine: Any) -> None:
        """Per phase of a schedule in seconds: the reference with every target pinned to the phase's."""
        samples = self.scenario.eval.reference_samples
        if self.timed is None:
            super().evaluate_reference(starting_engine)
        elif samples > 0:
            rows = timed_reference_rows(self.env, starting_engine, self.heldout, self.timed, samples, self.seed)
            self.store.append("reference", [{"arm": self.arm.name, "seed": self.seed, **r} for r in rows])


def run_arm_simulated(
    scenario: Scenario,
    arm: ArmConfig,
    seed: int,
    *,
    base_policy: torch.nn.Module,
    tokenizer: WordTokenizer,
    policy_key: str = "",
    resume: dict | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """`testbed.runtimes.loop.run_arm` on the simulated runtime: same arguments."""
    runner = SimRunner(scenario, arm, seed, base_policy=base_policy, tokenizer=tokenizer, **kw)
    runner.start(resume, policy_key, runner.engine)
    return runner.run()
