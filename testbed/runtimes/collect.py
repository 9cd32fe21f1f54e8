"""Collect: reset -> generate -> judge -> stamp.

The piece both runtimes share (the synchronous loop and the Ray runtime), and that held-out
evaluation and trainer warm-ups reuse, to turn prompts into judged, stamped Trajectories:

    round = collector.issue(n_prompts, clock)      prompts with the target at generation time
    trajs = engine.generate(round.prompts)          (here, or in a rollout actor)
    trajs = collector.judge(round, trajs)           judged at the clock and target of judge time

Generation and judging are split so that a runtime can generate on other processes while the
env, the only owner of the drift clock, judges in one place. In the synchronous loop both
happen at the same clock; asynchronously a switch can fall between them, and each episode then
records both targets (`generation_target` and `target_style`).
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testbed.envs.style_shift import EpisodeStart
from testbed.protocols import Engine, Env
from testbed.runtimes.learn import stop_if_refused
from testbed.types import Trajectory
from testbed.world import STYLES, PromptSpec
from testbed.world.rules import unit_hash


@dataclass
class Timer:
    """Wall time per part of the loop, for the throughput benchmark and the manifest."""

    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def part(self, name: str) -> _Lap:
        return _Lap(self, name)


class _Lap:
    def __init__(self, timer: Timer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.timer.seconds[self.name] += time.perf_counter() - self.start


@dataclass
class Round:
    """Episodes issued together: their starts as rendered at generation time, and where their
    GRPO-style groups begin."""

    starts: list[EpisodeStart]
    first_group: int
    group_size: int

    @property
    def prompts(self) -> list[str]:
        return [s.prompt_text for s in self.starts]


class Collector:
    """Issues and judges training episodes for one arm x seed on one env."""

    def __init__(
        self,
        env: Env,
        arm: str,
        seed: int,
        group_size: int,
        budget: int,
        gold: Any = None,
        gold_share: float = 1.0,
    ):
        self.env, self.arm, self.seed, self.group_size, self.budget = env, arm, seed, group_size, budget
        self.gold, self.gold_share = gold, gold_share  # a gold judge scores (a share of) the episodes too

    def issue(self, n_prompts: int, first_group: int, pending: int = 0) -> Round:
        """`n_prompts` prompts (each `group_size` times) rendered with the targets in force now
        (clocks env.clock, env.clock + 1, ...); never more episodes than the budget has left once
        the `pending` episodes already issued elsewhere are judged."""
        left = max(0, self.budget - self.env.clock - pending)
        starts = self.env.reset_batch(n_prompts, repeat=self.group_size)[:left]
        return Round(starts, first_group, self.group_size)

    def judge(self, round_: Round, trajs: list[Trajectory]) -> list[Trajectory]:
        """Judge a generated round at the env's clock now and stamp every trajectory. Judged
        episodes get consecutive clock values; a failed one the clock at which it failed."""
        t0 = self.env.clock
        at_judge = [self.env.retarget(s, t0 + i) for i, s in enumerate(round_.starts)]
        verdicts = self.env.step_batch(at_judge, [tr.response_text for tr in trajs])
        clocks = self.env.episode_clocks(t0, verdicts)
        scored = []  # what the gold judge sees: each judged episode as the training judge saw it
        for i, (traj, made, judged, verdict, t) in enumerate(zip(trajs, round_.starts, at_judge, verdicts, clocks)):
            # `judged`: the target the judge scored against (clock t0 + i). After a failure earlier in
            # a batch that straddles a switch, that can be a phase ahead of the episode's own clock t.
            traj.verdict, traj.t, traj.target_style = verdict, t, judged.target.style
            traj.candidates, traj.generation_target, traj.generation_t = (
                judged.target.candidates,
                made.target.style,
                made.t,
            )
            traj.prompt_id, traj.topic, traj.arm, traj.seed = made.prompt_id, made.topic, self.arm, self.seed
            traj.judge = getattr(judged, "judge", None) or ""  # a schedule that changes the judge: which one
            traj.group_id = round_.first_group + i // round_.group_size
            if (
                self.gold is not None
                and verdict.error is None
                and (self.gold_share >= 1 or unit_hash("gold", t) < self.gold_share)
            ):
                scored.append(
                    (traj, EpisodeStart(made.prompt_text, made.prompt_id, made.topic, t, judged.target, made.stream))
                )
        if scored:  # sampled by a hash of the clock: the same episodes for every arm
            gold = self.env.score_with(self.gold, [s for _, s in scored], [tr.response_text for tr, _ in scored])
            for (traj, _), verdict in zip(scored, gold):
                traj.gold_verdict = verdict
        return trajs


def dropped_rows(trajs: list[Trajectory], learner_version: int) -> list[dict[str, Any]]:
    """One row per episode dropped at dequeue as too stale (`dropped.parquet`)."""
    return [
        {
            "arm": t.arm,
            "seed": t.seed,
            "t": t.t,
            "policy_version": t.policy_version,
            "learner_version": learner_version,
            "staleness": learner_version - t.policy_version,
        }
        for t in trajs
    ]


def episode_rows(trajs: list[Trajectory], learner_version: int | None, trained: bool = False) -> list[dict[str, Any]]:
    """One row per episode, with the run directory's column names. `staleness` is how many policy
    versions the learner was ahead when the episode was trained (`trained`) or dropped as too
    stale; None (with `learner_version` None) for one never trained (a failed verdict, or left
    over at the end of the run)."""
    rows = []
    for traj in trajs:
        v = traj.verdict
        assert v is not None
        rows.append(
            {
                "arm": traj.arm,
                "seed": traj.seed,
                "t": traj.t,
                "prompt_id": traj.prompt_id,
                "topic": traj.topic,
                "target_style": traj.target_style,
                "candidates": ",".join(traj.candidates),
                "judged_style": v.style,
                "r_quality": int(v.quality),
                "r_style": int(v.style_match),
                "reward": v.reward if v.error is None else None,
                "judge_error": v.error,
                "judge_latency_s": v.latency_s,
                "group_id": traj.group_id,
                "policy_version": traj.policy_version,
                "staleness": None if learner_version is None else learner_version - traj.policy_version,
                "trained": trained,
                "generation_target": traj.generation_target,
                "generation_t": traj.generation_t,
                "response_tokens": len(traj.response_tokens),
                "response": traj.response_text,
                # multi-turn episodes: drafts written, the editor's reads, each earlier draft's reward and
                # judged style (the editor's verdicts), the notes
                "turns": traj.turns,
                "editor_calls": len(traj.turn_verdicts),
                "turn_rewards": ";".join("x" if t.error else f"{t.reward:g}" for t in traj.turn_verdicts),
                "turn_styles": ";".join("x" if t.error else str(t.style) for t in traj.turn_verdicts),
                "notes": " | ".join(traj.notes),
                # the gold judge's verdict (scenario.gold_judge), where it scored this episode
                **gold_columns(traj.gold_verdict),
                # simulated seconds (runtime.kind: simulated): started, completed (judged), trained
                **traj.sim_times,
                # which of the scenario's judges scored it, where the schedule changes the judge
                **({"judge": traj.judge} if traj.judge else {}),
            }
        )
    return rows


def gold_columns(gold: Any) -> dict[str, Any]:
    if gold is None or gold.error is not None:
        return {"gold_reward": None, "gold_quality": None, "gold_style": None}
    return {"gold_reward": gold.reward, "gold_quality": int(gold.quality), "gold_style": gold.style}


def evaluate_heldout(env: Env, engine: Engine, specs: list[PromptSpec], t: int) -> tuple[list[dict], list[str], int]:
    """Held-out style shares at clock t (one episode per held-out prompt, rendered with the
    candidates offered at t; the clock does not move), the errors of the failed verdicts and the
    judge calls made. An evaluation with no verdict at all is a gap: shares and rewards are
    missing, never 0. A multi-turn episode is scored on its last draft."""
    starts = env.eval_starts(specs, t)
    trajs = env.rollout(engine, starts)
    verdicts = env.evaluate_batch(starts, [tr.response_text for tr in trajs])
    errors = [v.error for v in verdicts if v.error is not None]
    errors += [v.error for tr in trajs for v in tr.turn_verdicts if v.error is not None]
    calls = sum(tr.judge_calls() for tr in trajs)
    rows = heldout_rows(verdicts, t, starts[0].target.style)
    judge = getattr(starts[0], "judge", None)  # a schedule that changes the judge: the one at t
    return [{**r, "judge": judge} for r in rows] if judge else rows, errors, calls


def heldout_rows(verdicts: list, t: int, target_style: str) -> list[dict]:
    ok = [v for v in verdicts if v.error is None]
    n = len(ok)
    counts = Counter(v.style for v in ok)
    reward = sum(v.reward for v in ok) / n if n else None
    quality = sum(v.quality for v in ok) / n if n else None
    styles = list(STYLES) + sorted(s for s in counts if s not in STYLES and s is not None)
    return [
        {
            "t": t,
            "style": s,
            "share": counts.get(s, 0) / n if n else None,
            "n": n,
            "eval_reward": reward,
            "eval_quality": quality,
            "target_style": target_style,
        }
        for s in styles
    ]


def judged_samples(
    env: Env,
    engine: Engine,
    specs: list[PromptSpec],
    n: int,
    seed: int,
    chunk: int = 128,
    on_step: Callable[..., None] | None = None,
) -> list[Trajectory]:
    """n samples from the engine's (fixed) policy on random training prompts, judged against the
    target at clock 0 without moving the clock; failed verdicts are dropped, a refused one
    (`testbed.types.judge_refused`) raises JudgeRefused. After each chunk,
    `on_step(sampled, n, quality=...)`: the mean quality of the judged samples so far."""
    rng = random.Random(seed)
    out: list[Trajectory] = []
    quality = 0.0
    for i in range(0, n, chunk):
        starts = env.eval_starts([rng.choice(specs) for _ in range(min(chunk, n - i))], 0, first=i)
        trajs = env.rollout(engine, starts)
        verdicts = env.evaluate_batch(starts, [t.response_text for t in trajs])
        stop_if_refused(verdicts)
        for traj, start, verdict in zip(trajs, starts, verdicts):
            if verdict.error is None:
                traj.verdict, traj.t, traj.target_style, traj.prompt_id = (
                    verdict,
                    0,
                    start.target.style,
                    start.prompt_id,
                )
                out.append(traj)
                quality += verdict.quality
        if on_step is not None:
            on_step(i + len(starts), n, quality=quality / len(out) if out else float("nan"))
    return out
