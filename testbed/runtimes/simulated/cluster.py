"""A discrete-event model of an asynchronous RL cluster: `rollout_slots` episodes in flight, one
learner, weight versions. It decides, in simulated seconds, when each episode starts (and so which
policy version generates it), when it completes, when the learner takes it and when a new version
is published. What runs on it (the prompts, the policy, the judge, the trainer) is a `Workload`.

    slot free -> start (version now) -> generate -> complete at start + latency -> judged, queued
    learner idle and a batch queued -> update (busy for its time + sync) -> version + 1

- **Generation is batched without changing what is simulated.** An episode's latency factors are
  drawn when it starts, so its earliest completion is known before its response exists. Started
  episodes wait, ungenerated, until the next known event could come after one of them; then all
  of them are generated at once, each with the weights of the version it started under (the
  workload keeps those versions). A round that starts together is one batch, as in the
  synchronous loop.
- **Ties** at one instant: completions first (in start order), then a learner that is done (one
  that takes no time is done at once), then new starts. With `rollout_slots` = one batch, equal
  latencies and updates that take no time, it runs the synchronous loop's order exactly.
- **Staleness.** `drop`: a free slot starts an episode at once (while the episodes in flight and
  queued stay under the queue limit, the Ray runtime's `queue_size`); the workload drops, at dequeue,
  what is too stale. `pace`: no episode starts while the updates due before it is trained
  (learner busy, plus whole batches ahead of it) would exceed `max_staleness`.
- **Evaluations.** `evaluation: aside` takes no simulated time and waits for nothing. `drain`
  models the Ray runtime's loop, which evaluates the newest policy: the learner finishes its update
  in progress, then trains the next whole queued batch, while no episode starts and none that
  completes meanwhile is judged (the driver is blocked); those are judged when the drain ends.
- **Groups.** A job is one episode, or a GRPO group of `group_size` episodes that start together
  (or `issue_size` episodes: a rollout actor's round, generated as one batch, so its members share
  one latency draw); each member frees its slot when it
  completes, and the job is queued when its last member is.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from testbed.runtimes.simulated.latency import (
    Draws,
    draw,
    earliest_seconds,
    episode_seconds,
    update_factor,
    update_seconds,
)
from testbed.scenario.simulation import SimulationConfig


@dataclass
class Job:
    """Episodes that start together and are queued together: one rollout, or a GRPO group."""

    seq: int  # start order
    group: int  # the first group id of the job
    starts: list[Any]  # the workload's episode starts
    version: int  # the published version when it started: what generates it
    start_s: float
    draws: list[Draws]
    trajs: list[Any] = field(default_factory=list)  # generated episodes, one per start
    done_s: list[float] = field(default_factory=list)  # each member's completion
    left: int = 0  # members still in flight


class Workload(Protocol):
    """What runs on the simulated cluster (the simulated runtime's arm runner, or a test's)."""

    def issue(self, jobs: int, pending: int) -> list[list[Any]]:
        """Starts for up to `jobs` jobs of `job_size` episodes (fewer or none once the budget is spent)."""
        ...

    def generate(self, jobs: list[Job], version: int) -> None:
        """Fill each job's `trajs` with the weights of `version`."""
        ...

    def arrive(self, jobs: list[Job], now: float) -> None:
        """Judge and queue jobs whose last member completed at `now`, in this order."""
        ...

    def queued(self) -> int:
        """Judged episodes waiting for the learner."""
        ...

    def take(self, version: int, now: float) -> list[Any] | None:
        """The next batch (the too stale dropped), or None."""
        ...

    def train(self, batch: list[Any], now: float, done_s: float) -> int:
        """One update on `batch`, started at `now`; returns the version it makes (a critic-only
        warm-up update keeps the policy's), published at `done_s`."""
        ...

    def publish(self, version: int, now: float) -> None: ...

    def between_events(self, now: float) -> None:
        """Called before new starts at every step (the workload's evaluations)."""
        ...

    def eval_due(self) -> bool:
        """Whether a held-out evaluation is due (read only under `evaluation: drain`)."""
        ...


def tokens_and_turns(traj: Any) -> tuple[int, int]:
    return len(traj.response_tokens), max(1, traj.turns)


def batch_tokens(batch: list[Any]) -> int:
    return sum(len(t.prompt_tokens) + len(t.response_tokens) for t in batch)


class SimulatedCluster:
    """The event model (see the module docstring). `run(workload)` until nothing is left to do."""

    def __init__(
        self,
        cfg: SimulationConfig,
        batch_size: int,
        group_size: int,
        max_staleness: int | None,
        seed: int,
        queue_limit: int | None = None,
    ):
        self.job_size = cfg.issue_size or group_size  # episodes a job starts with
        if self.job_size % group_size:
            raise ValueError(
                f"runtime.simulation.issue_size is {cfg.issue_size}, not a multiple of the trainer's group_size "
                f"({group_size}): a job starts whole groups"
            )
        if cfg.rollout_slots < self.job_size:
            raise ValueError(
                f"runtime.simulation.rollout_slots is {cfg.rollout_slots} but a job needs {self.job_size} "
                "slots at once: set it to at least the trainer's group_size (and runtime.simulation.issue_size)"
            )
        self.cfg, self.batch_size, self.group_size, self.max_staleness = cfg, batch_size, group_size, max_staleness
        self.queue_limit = queue_limit  # episodes in flight and queued, at most (None: no limit)
        self.rng = np.random.default_rng([seed, 26])  # latency draws: their own stream, in start order
        self.learner_rng = np.random.default_rng([seed, 26, 1])  # the updates' factors: a stream of their own
        self.now, self.version, self.free = 0.0, 0, cfg.rollout_slots
        self.pending: list[Job] = []  # started, not yet generated
        self.pending_due = float("inf")  # the earliest any of them could complete
        self.events: list[tuple[float, int, int, Job]] = []  # (done_s, job seq, member, job)
        self.in_flight = 0  # episodes started and not yet queued
        self.learner_until: float | None = None
        self.publishing = 0  # the version the update in progress makes
        self.next_seq = self.next_group = 0
        self.exhausted = False  # the workload issued nothing: its budget is spent
        self.busy = {"learner_s": 0.0, "slot_s": 0.0}

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, work: Workload) -> None:
        while True:
            if self.learner_until is not None and self.learner_until <= self.now:
                self.finish_update(work)  # done at the instant of the completions just handled
            self.start_update(work)
            if self.cfg.evaluation == "drain" and work.eval_due():
                self.drain(work)
            work.between_events(self.now)
            self.start_rollouts(work)
            if self.pending and self.must_generate():
                self.generate(work)
            if not self.step(work):
                return

    def step(self, work: Workload) -> bool:
        """Advance to the next event and handle it; False when none is left."""
        done_at = self.events[0][0] if self.events else None
        if done_at is not None and (self.learner_until is None or done_at <= self.learner_until):
            self.complete(done_at, work)
        elif self.learner_until is not None:
            self.now = max(self.now, self.learner_until)
            self.finish_update(work)
        else:
            return False
        return True

    def known_next(self) -> float | None:
        times = [t for t in (self.events[0][0] if self.events else None, self.learner_until) if t is not None]
        return min(times) if times else None

    def must_generate(self) -> bool:
        """Whether a started episode could complete before (or at) the next known event."""
        horizon = self.known_next()
        return horizon is None or self.pending_due <= horizon

    # -- rollouts ---------------------------------------------------------------------------------

    def updates_ahead(self, queued: int, extra: int) -> int:
        """Updates due before an episode started now is trained (whole batches ahead of it, FIFO)."""
        return (self.learner_until is not None) + (queued + self.in_flight + extra) // self.batch_size

    def startable(self, queued: int) -> int:
        """Jobs that may start now: free slots, room under the queue limit, and under `pace` the
        staleness gate."""
        n = self.free // self.job_size
        if self.queue_limit is not None:
            n = min(n, max(0, self.queue_limit - queued - self.in_flight) // self.job_size)
        if self.cfg.staleness_policy != "pace" or self.max_staleness is None:
            return n
        k = 0
        while k < n and self.updates_ahead(queued, k * self.job_size) <= self.max_staleness:
            k += 1
        return k

    def start_rollouts(self, work: Workload) -> None:
        if self.exhausted:
            return
        n = self.startable(work.queued())
        if n == 0:
            return
        groups = work.issue(n, self.in_flight)
        if not groups:
            self.exhausted = True
            return
        for starts in groups:
            if self.cfg.issue_size:  # a static round is generated as one batch: one random factor for it
                draws = [draw(self.cfg.latency, self.rng)] * len(starts)
            else:
                draws = [draw(self.cfg.latency, self.rng) for _ in starts]
            job = Job(self.next_seq, self.next_group, starts, self.version, self.now, draws, left=len(starts))
            self.next_seq += 1
            self.next_group += -(-len(starts) // self.group_size)
            self.free -= len(starts)
            self.in_flight += len(starts)
            self.pending.append(job)
            earliest = min(earliest_seconds(self.cfg.latency, d) for d in draws)
            self.pending_due = min(self.pending_due, self.now + earliest)

    def generate(self, work: Workload) -> None:
        """Generate every started episode, by the version it started under, and schedule its end."""
        for version in sorted({job.version for job in self.pending}):
            jobs = [job for job in self.pending if job.version == version]
            work.generate(jobs, version)
            for job in jobs:
                for member, (traj, d) in enumerate(zip(job.trajs, job.draws)):
                    seconds = episode_seconds(self.cfg.latency, d, *tokens_and_turns(traj))
                    job.done_s.append(job.start_s + seconds)
                    self.busy["slot_s"] += seconds
                    heapq.heappush(self.events, (job.start_s + seconds, job.seq, member, job))
        self.pending, self.pending_due = [], float("inf")

    def complete(self, at: float, work: Workload) -> None:
        """Every member completing at `at`: free its slot; queue the jobs now complete (judged now,
        later than `at` if a drain held them)."""
        self.now = max(self.now, at)
        arrived = []
        while self.events and self.events[0][0] == at:
            _, _, _, job = heapq.heappop(self.events)
            self.free += 1
            job.left -= 1
            if job.left == 0:
                arrived.append(job)
                self.in_flight -= len(job.starts)
        if arrived:
            work.arrive(sorted(arrived, key=lambda j: j.seq), self.now)

    # -- the learner ------------------------------------------------------------------------------

    def start_update(self, work: Workload) -> None:
        if self.learner_until is not None:
            return
        batch = work.take(self.version, self.now)
        if batch is None:
            return
        factor = update_factor(self.cfg.learner, self.learner_rng)
        seconds = update_seconds(self.cfg.learner, batch_tokens(batch), factor)
        self.learner_until = self.now + seconds
        self.busy["learner_s"] += seconds
        self.publishing = work.train(batch, self.now, self.learner_until)
        if seconds == 0:  # an update that takes no time publishes before anything else starts
            self.finish_update(work)

    def drain(self, work: Workload) -> None:
        """Before an evaluation (`evaluation: drain`): the update in progress, then one more on the
        next whole queued batch, each to its end; completions meanwhile wait (see the docstring)."""
        for start in (False, True):
            if start:
                self.start_update(work)
            if self.learner_until is not None:
                self.now = max(self.now, self.learner_until)
                self.finish_update(work)

    def finish_update(self, work: Workload) -> None:
        self.learner_until = None
        self.version = self.publishing
        work.publish(self.version, self.now)

    def summary(self) -> dict[str, float]:
        """Idle shares over the simulated run so far."""
        span = max(self.now, 1e-12)
        return {
            "sim_seconds": round(self.now, 3),
            "learner_idle_share": round(1 - self.busy["learner_s"] / span, 4),
            "slot_idle_share": round(1 - self.busy["slot_s"] / (span * self.cfg.rollout_slots), 4),
        }
