"""The simulated cluster's event model (testbed/runtimes/simulated/cluster.py) on a bare workload:
its staleness and learner idle share against the queueing figures, drop against pace on a case
built by hand, GRPO groups completing at their last member, and the latency model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from testbed.runtimes.simulated.cluster import SimulatedCluster
from testbed.runtimes.simulated.latency import Draws, draw, episode_seconds, update_seconds
from testbed.scenario.simulation import LatencyConfig, LearnerTimeConfig, SimulationConfig


class Bare:
    """A workload without a policy: episode i has `tokens(i)` response tokens; the learner takes
    batches of `batch` in completion order and drops (then issues again) what is too stale."""

    def __init__(self, budget, batch, group=1, tokens=lambda prompt, member: 1, max_staleness=None):
        self.budget, self.batch, self.group, self.tokens, self.max_staleness = (
            budget,
            batch,
            group,
            tokens,
            max_staleness,
        )
        self.issued, self.again, self.queue, self.version = 0, [], [], 0
        self.trained, self.dropped, self.starts, self.arrivals, self.published = [], [], [], [], []

    def issue(self, groups, pending):
        out = []
        for _ in range(groups):
            if self.again:
                out.append([self.again.pop(0)] * self.group)
            elif self.issued < self.budget:
                out.append([self.issued] * self.group)
                self.issued += 1
        return out

    def generate(self, jobs, version):
        for job in jobs:
            self.starts.append((job.starts[0], job.start_s, job.version))
            job.trajs = [
                SimpleNamespace(prompt=p, response_tokens=[0] * self.tokens(p, k), prompt_tokens=[], turns=1)
                for k, p in enumerate(job.starts)
            ]

    def arrive(self, jobs, now):
        for job in jobs:
            self.arrivals.append((job, now))
            self.queue += [(job, t) for t in job.trajs]

    def queued(self):
        return len(self.queue)

    def take(self, version, now):
        while self.queue and self.max_staleness is not None and version - self.queue[0][0].version > self.max_staleness:
            job, traj = self.queue.pop(0)
            self.dropped.append(traj.prompt)
            if traj is job.trajs[0]:
                self.again.append(traj.prompt)
        if len(self.queue) < self.batch:
            return None
        batch, self.queue = self.queue[: self.batch], self.queue[self.batch :]
        self.trained += [(job.trajs[0].prompt, version - job.version, job.start_s) for job, _ in batch]
        return [traj for _, traj in batch]

    def train(self, batch, now, done_s):
        self.version += 1
        return self.version

    def publish(self, version, now):
        self.published.append((version, now))

    def between_events(self, now):
        pass


def sim(slots=8, policy="drop", latency=None, learner=None):
    return SimulationConfig.model_validate(
        {"rollout_slots": slots, "staleness_policy": policy, "latency": latency or {}, "learner": learner or {}}
    )


def test_staleness_and_learner_idle_share_match_the_queueing_figures():
    """N slots with exponential latencies of mean m complete as a Poisson stream of rate N/m. Each
    update finishes with every started, untrained episode one version older: the N in flight plus
    those queued during its u seconds (N u / m on average), so the mean staleness is
    (N + N u / m) / B (B: batch), and the learner is busy N u / (m B) of the time."""
    n, m, b, u = 8, 1.0, 4, 0.05
    cfg = sim(
        n,
        latency={"per_token_s": 0, "per_turn_s": m, "distribution": "exponential", "judge_s": 0},
        learner={"fixed_s": u, "per_token_s": 0, "sync_s": 0},
    )
    work = Bare(budget=30_000, batch=b)
    cluster = SimulatedCluster(cfg, b, 1, None, seed=0)
    cluster.run(work)
    staleness = np.array([s for _, s, _ in work.trained])
    assert len(staleness) == 30_000
    rate = n / m
    assert staleness.mean() == pytest.approx((n + rate * u) / b, abs=0.04)
    assert cluster.summary()["learner_idle_share"] == pytest.approx(1 - rate * u / b, abs=0.01)
    assert cluster.summary()["slot_idle_share"] < 0.01  # a slot starts again the instant it is free


def long_first(prompt, member):
    return 10 if prompt == 0 else 1


HAND = {
    "latency": {"per_token_s": 1.0, "per_turn_s": 0, "judge_s": 0},
    "learner": {"fixed_s": 0.5, "per_token_s": 0, "sync_s": 0},
}


def test_drop_drops_and_requeues_the_long_episode():
    """Two slots, batches of one, max_staleness 0: episode 0 takes 10 s, the others 1 s. Under
    `drop` the learner moves on while episode 0 runs; it completes 10 versions behind, is dropped,
    and its prompt is issued again (the requeue that favours short rollouts)."""
    work = Bare(budget=12, batch=1, tokens=long_first, max_staleness=0)
    SimulatedCluster(sim(2, "drop", **HAND), 1, 1, 0, seed=0).run(work)
    assert 0 in work.dropped
    assert [p for p, _, _ in work.starts].count(0) >= 2  # issued again after the drop
    assert all(s == 0 for _, s, _ in work.trained)  # the bound holds for what is trained


def test_pace_never_starts_an_episode_that_the_bound_would_drop():
    """The same case under `pace`: a second episode would be trained a version after it started,
    so none starts while one is in flight or queued; nothing is dropped, nothing is stale, and
    every start comes after the previous version is published."""
    work = Bare(budget=12, batch=1, tokens=long_first, max_staleness=0)
    SimulatedCluster(sim(2, "pace", **HAND), 1, 1, 0, seed=0).run(work)
    assert work.dropped == [] and len(work.trained) == 12
    assert all(s == 0 for _, s, _ in work.trained)
    published = [t for _, t in work.published]
    for (_, start, version), before in zip(work.starts[1:], published):
        assert version >= 1 and start >= before  # never started before the version it needs
    assert work.starts[1][1] == pytest.approx(10.5)  # episode 0 (10 s) then its update (0.5 s)


def test_a_group_is_queued_when_its_last_member_completes_and_each_member_frees_its_slot():
    work = Bare(budget=6, batch=4, group=4, tokens=lambda p, member: 1 + 3 * member)  # members: 1, 4, 7, 10 s
    cluster = SimulatedCluster(sim(6, "drop", **HAND), 4, 4, None, seed=0)
    cluster.run(work)
    for job, at in work.arrivals:
        assert at == max(job.done_s) == job.start_s + 10
    # 6 slots, groups of 4: the second group starts when two members of the first have finished (t = 4)
    assert work.starts[1][1] == pytest.approx(4.0)


def test_a_groups_finished_members_hold_the_queue_limit_until_its_last_member_lands():
    """Why GRPO judges fewer episodes a second under the queue limit (docs/simulated.md, 256 slots):
    with room for one group and one more episode under the limit, the second group waits for the
    first's slowest member (10 s), although three of its members are done by 7 s; counted one by one
    it would start at 7 s; without the limit it starts at once."""
    tokens = lambda p, member: 1 + 3 * member  # noqa: E731  (members: 1, 4, 7, 10 s)
    limited, unlimited = (
        Bare(budget=2, batch=4, group=4, tokens=tokens),
        Bare(budget=2, batch=4, group=4, tokens=tokens),
    )
    SimulatedCluster(sim(8, "drop", **HAND), 4, 4, None, seed=0, queue_limit=5).run(limited)
    SimulatedCluster(sim(8, "drop", **HAND), 4, 4, None, seed=0).run(unlimited)
    assert unlimited.starts[1][1] == 0.0
    assert limited.starts[1][1] >= 10.0  # the first group landed whole (and was taken) before it


def test_too_few_slots_for_a_group_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="rollout_slots"):
        SimulatedCluster(sim(2), 4, 4, None, seed=0)


def test_latency_model_by_hand():
    cfg = LatencyConfig(per_token_s=0.02, per_turn_s=0.5, judge_s=0.2)
    assert episode_seconds(cfg, Draws(generation=2.0, judge_s=0.3), tokens=50, turns=2) == pytest.approx(
        (0.5 * 2 + 0.02 * 50) * 2.0 + 0.3
    )
    assert update_seconds(LearnerTimeConfig(fixed_s=1.0, per_token_s=0.001, sync_s=2.0), 1000) == pytest.approx(4.0)
    rng = np.random.default_rng(0)
    lognormal = [draw(LatencyConfig(spread=0.5), rng).generation for _ in range(20_000)]
    assert np.median(lognormal) == pytest.approx(1.0, abs=0.03) and np.std(np.log(lognormal)) == pytest.approx(
        0.5, abs=0.02
    )
    exponential = [draw(LatencyConfig(distribution="exponential"), rng).generation for _ in range(20_000)]
    assert np.mean(exponential) == pytest.approx(1.0, abs=0.03) and np.median(exponential) == pytest.approx(
        np.log(2), abs=0.03
    )
    stragglers = [draw(LatencyConfig(straggler_share=0.1, straggler_factor=10), rng).generation for _ in range(5000)]
    assert np.mean(np.array(stragglers) == 10) == pytest.approx(0.1, abs=0.02)


def test_the_queue_limit_bounds_episodes_in_flight_and_queued():
    """A slow learner (5 s an update) and fast rollouts (1 s): without a limit the slots keep
    generating; with one, no slot starts while the episodes in flight and queued are at it."""
    cfg = sim(8, "drop", latency={"per_token_s": 0, "per_turn_s": 1.0, "judge_s": 0}, learner={"fixed_s": 5.0})

    class Watched(Bare):
        def issue(self, groups, pending):
            out = super().issue(groups, pending)
            self.held = max(getattr(self, "held", 0), pending + len(self.queue) + len(out))
            return out

    limited, unlimited = Watched(budget=40, batch=2), Watched(budget=40, batch=2)
    SimulatedCluster(cfg, 2, 1, None, seed=0, queue_limit=6).run(limited)
    SimulatedCluster(cfg, 2, 1, None, seed=0).run(unlimited)
    assert limited.held <= 6 < unlimited.held
    assert len(limited.trained) == len(unlimited.trained) == 40  # the limit delays, it loses nothing


class Evaluated(Bare):
    """A Bare workload with one held-out evaluation, due once an episode has arrived."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.evals = []  # (time, the newest published version) of each evaluation

    def eval_due(self):
        return not self.evals and len(self.arrivals) >= 1

    def between_events(self, now):
        if self.eval_due():
            self.evals.append((now, self.published[-1][0] if self.published else 0))

    def train(self, batch, now, done_s):
        self.updates = getattr(self, "updates", []) + [(now, done_s)]
        return super().train(batch, now, done_s)


def test_a_draining_evaluation_waits_for_the_learner_and_holds_completions_as_the_ray_driver_does():
    """Two slots, batches of one, a 3 s update: episode 0 takes 1 s, episode 1 2 s. At t = 1 episode
    0 is trained (until t = 4) and the evaluation is due. `aside` evaluates version 0 at once and
    the freed slot starts episode 2 then. `drain` waits for the update (t = 4), finds no whole
    batch queued (episode 1 completed at t = 2 but waits, unjudged, like a round the blocked Ray
    driver has not collected), evaluates version 1 at t = 4, and only then starts episode 2 and
    judges episode 1."""
    latency = {"per_token_s": 1.0, "per_turn_s": 0, "judge_s": 0}
    learner = {"fixed_s": 3.0, "per_token_s": 0, "sync_s": 0}
    runs = {}
    for evaluation in ("aside", "drain"):
        cfg = SimulationConfig.model_validate(
            {"rollout_slots": 2, "latency": latency, "learner": learner, "evaluation": evaluation}
        )
        work = Evaluated(budget=4, batch=1, tokens=lambda p, member: 2 if p == 1 else 1)
        SimulatedCluster(cfg, 1, 1, None, seed=0).run(work)
        runs[evaluation] = work
    aside, drain = runs["aside"], runs["drain"]
    assert aside.evals == [(1.0, 0)] and drain.evals == [(4.0, 1)]
    assert (aside.starts[2][1], aside.starts[2][2]) == (1.0, 0)  # episode 2: started at t = 1 under version 0
    assert (drain.starts[2][1], drain.starts[2][2]) == (4.0, 1)  # not before the drain ends, under version 1
    arrived = {job.starts[0]: (max(job.done_s), at) for job, at in drain.arrivals}
    assert arrived[1] == (2.0, 4.0)  # completed at 2 s, judged when the drain ended
    assert {job.starts[0]: at for job, at in aside.arrivals}[1] == 2.0
    assert len(drain.trained) == len(aside.trained) == 4  # it delays, it loses nothing


def test_a_drain_trains_the_next_whole_batch_too():
    """Both episodes complete at t = 1; the learner takes episode 0 (3 s), and the drain trains
    episode 1 after it (t = 4 .. 7) before the evaluation reads version 2 at t = 7."""
    cfg = SimulationConfig.model_validate(
        {
            "rollout_slots": 2,
            "latency": {"per_token_s": 0, "per_turn_s": 1.0, "judge_s": 0},
            "learner": {"fixed_s": 3.0, "per_token_s": 0, "sync_s": 0},
            "evaluation": "drain",
        }
    )
    work = Evaluated(budget=4, batch=1)
    SimulatedCluster(cfg, 1, 1, None, seed=0).run(work)
    assert work.evals == [(7.0, 2)]
    assert work.updates[:2] == [(1.0, 4.0), (4.0, 7.0)]
    assert [start for _, start, _ in work.starts[2:]] == [7.0, 7.0]


def test_a_static_round_shares_one_latency_draw_and_single_slots_draw_their_own():
    """With `issue_size` a job is one batched generation (a Ray actor's round): its members
    complete together whatever the spread; without it, continuous batching, each its own time."""
    latency = {"per_token_s": 0, "per_turn_s": 1.0, "judge_s": 0, "spread": 1.0}
    for issue_size, together in ((4, True), (None, False)):
        cfg = SimulationConfig.model_validate({"rollout_slots": 8, "issue_size": issue_size, "latency": latency})
        work = Bare(budget=8 if issue_size else 32, batch=4, group=4 if issue_size else 1)  # issues whole jobs
        SimulatedCluster(cfg, 4, 1, None, seed=0).run(work)
        if together:
            assert all(len(job.starts) == 4 and len(set(job.done_s)) == 1 for job, _ in work.arrivals)
        else:
            assert len({max(job.done_s) - job.start_s for job, _ in work.arrivals}) == 32


def test_the_learner_spread_varies_updates_on_its_own_stream():
    """`learner.spread`: each update's time (before the sync) times a log-normal factor of median 1;
    drawn from a stream of its own, so the episodes' latencies are the same draws as without it."""
    latency = {"per_token_s": 0, "per_turn_s": 1.0, "judge_s": 0, "spread": 0.5}
    durations, episode_seconds_ = {}, {}
    for spread in (0.0, 0.5):
        learner = {"fixed_s": 0.1, "per_token_s": 0, "sync_s": 0.05, "spread": spread}
        work = Evaluated(budget=4000, batch=1)
        work.eval_due = lambda: False
        SimulatedCluster(sim(8, latency=latency, learner=learner), 1, 1, None, seed=0).run(work)
        durations[spread] = np.array([done - now for now, done in work.updates])
        jobs = sorted((job for job, _ in work.arrivals), key=lambda job: job.seq)
        episode_seconds_[spread] = [job.done_s[0] - job.start_s for job in jobs]
    assert np.allclose(durations[0.0], 0.15)
    compute = durations[0.5] - 0.05
    assert np.median(compute) == pytest.approx(0.1, rel=0.05)
    assert np.std(np.log(compute / 0.1)) == pytest.approx(0.5, abs=0.03)
    assert episode_seconds_[0.0] == episode_seconds_[0.5]
