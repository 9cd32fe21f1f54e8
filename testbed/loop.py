"""The synchronous online loop for one arm x seed.

    prompts   <- env.reset_batch(B)              (the env owns the drift clock)
    responses <- engine.generate(prompts)         (behaviour log-probs recorded)
    verdicts  <- env.step_batch(responses)        (the judge sees the target at each clock)
    metrics   <- trainer.update(batch)            (once a full batch of judged episodes is in)
    store.append(episodes, updates, evals)        (every row, as it happens)

Episodes whose verdict carries a judge error are stored and counted but never trained on; they
do not move the clock, so an outage is a gap in attempts, never zeros in the reward curve. Every
judged episode has its own clock value t. A judge that keeps failing, or NaN/inf updates that keep
coming, stop the run with a checkpoint (`RunStopped`); `--resume RUN_DIR` continues it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from testbed import checkpoint, registry
from testbed.config import ArmConfig, Scenario
from testbed.envs.style_shift import EpisodeStart, StyleShiftEnv
from testbed.models.tokenizer import WordTokenizer
from testbed.protocols import DriftSchedule, Engine, Judge
from testbed.store import RunStore
from testbed.types import Trajectory
from testbed.world import STYLES, PromptSpec, prompts


@dataclass
class Timer:
    """Wall time per part of the loop, for the throughput benchmark and the manifest."""

    seconds: Counter = field(default_factory=Counter)

    def part(self, name: str) -> _Lap:
        return _Lap(self, name)


class _Lap:
    def __init__(self, timer: Timer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.timer.seconds[self.name] += time.perf_counter() - self.start


def make_engine(scenario: Scenario, policy: torch.nn.Module, tokenizer: WordTokenizer) -> Engine:
    """The scenario's rollout engine, looked up by name like every plugin."""
    return registry.load("engine", scenario.engine.name)(policy, tokenizer, scenario.sampling, **scenario.engine.args)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.fields[arm]}[/] seed {task.fields[seed]}"),
        BarColumn(),
        TextColumn("t {task.completed:>5.0f}/{task.total:.0f}"),
        TextColumn("target [cyan]{task.fields[target]:<10}[/]"),
        TextColumn("reward {task.fields[reward]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )


def episode_rows(arm: str, seed: int, trajs: list[Trajectory], starts: list[EpisodeStart], trainer_version: int) -> list[dict]:
    """One row per episode, judged or failed, with the run directory's column names."""
    rows = []
    for traj, start in zip(trajs, starts):
        v = traj.verdict
        assert v is not None
        rows.append({
            "arm": arm,
            "seed": seed,
            "t": start.t,
            "prompt_id": start.prompt_id,
            "topic": start.topic,
            "target_style": start.target.style,
            "candidates": ",".join(start.target.candidates),
            "judged_style": v.style,
            "r_quality": int(v.quality),
            "r_style": int(v.style_match),
            "reward": v.reward if v.error is None else None,
            "judge_error": v.error,
            "judge_latency_s": v.latency_s,
            "group_id": traj.group_id,
            "policy_version": traj.policy_version,
            "staleness": trainer_version - traj.policy_version,
            "response_tokens": len(traj.response_tokens),
            "response": traj.response_text,
        })
    return rows


def evaluate_heldout(env: StyleShiftEnv, engine: Engine, specs: list[PromptSpec], t: int) -> tuple[list[dict], float]:
    """Held-out style shares at clock t: one sample per held-out prompt, rendered with the
    candidates offered at t; the clock does not move."""
    starts = env.eval_starts(specs, t)
    trajs = engine.generate([s.prompt_text for s in starts])
    verdicts = env.evaluate_batch(starts, [tr.response_text for tr in trajs])
    ok = [v for v in verdicts if v.error is None]
    counts = Counter(v.style for v in ok)
    reward = sum(v.reward for v in ok) / max(1, len(ok))
    quality = sum(v.quality for v in ok) / max(1, len(ok))
    styles = list(STYLES) + sorted(s for s in counts if s not in STYLES and s is not None)
    rows = [
        {"t": t, "style": s, "share": counts.get(s, 0) / max(1, len(ok)), "n": len(ok),
         "eval_reward": reward, "eval_quality": quality, "target_style": starts[0].target.style}
        for s in styles
    ]
    return rows, reward


def judged_samples(env: StyleShiftEnv, engine: Engine, specs: list[PromptSpec], n: int, seed: int, chunk: int = 128) -> list[Trajectory]:
    """n samples from the engine's (fixed) policy on random training prompts, judged against the
    target at clock 0 without moving the clock; failed verdicts are dropped."""
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for i in range(0, n, chunk):
        starts = env.eval_starts([rng.choice(specs) for _ in range(min(chunk, n - i))], 0)
        trajs = engine.generate([s.prompt_text for s in starts])
        for traj, start, verdict in zip(trajs, starts, env.evaluate_batch(starts, [t.response_text for t in trajs])):
            if verdict.error is None:
                traj.verdict, traj.t, traj.target_style, traj.prompt_id = verdict, 0, start.target.style, start.prompt_id
                out.append(traj)
    return out


def warm_up(trainer: Any, env: StyleShiftEnv, engine: Engine, cache_key: dict, log: Callable[[str], None]) -> dict:
    """A trainer's warm-up on `warmup_samples` judged samples from the fixed starting policy (SAO:
    value pretraining), cached by everything that determines its result."""
    from testbed.models.sft import cache_root  # the cache lives beside the SFT policy's

    key = hashlib.sha256(json.dumps(cache_key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_root() / f"critic-{key}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=False)
        trainer.load_warmup_state(saved["state"])
        return {**saved["report"], "cached": str(path)}
    log(f"{type(trainer).__name__} warm-up on {trainer.warmup_samples} judged samples from the starting policy (cached as {path})")
    started = time.perf_counter()
    samples = judged_samples(env, engine, prompts("train"), trainer.warmup_samples, seed=0)
    report = {**trainer.warmup(samples), "judge_calls": trainer.warmup_samples,
              "seconds": round(time.perf_counter() - started, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"state": trainer.warmup_state(), "report": report}, tmp)
    os.replace(tmp, path)
    return report


def judge_counters(judge: Judge) -> dict[str, float]:
    """The judge's cumulative accounting, if it keeps any (LLM judges do)."""
    stats = getattr(judge, "stats", None)
    return {k: float(v) for k, v in stats().items()} if callable(stats) else {}


def counter_delta(start: dict[str, float], now: dict[str, float], offset: dict[str, float] | None = None) -> dict[str, float]:
    """This arm's share of a judge's cumulative counters (latency percentiles are kept as they
    are), plus what it had used before a resume (`offset`)."""
    offset = offset or {}
    return {k: (v - start.get(k, 0.0) + offset.get(k, 0.0)) if "latency" not in k else v for k, v in now.items()}


class RunStopped(RuntimeError):
    """The loop stopped on purpose (a judge outage, numerical trouble) after writing a checkpoint
    that `--resume` continues from."""


@dataclass
class LoopState:
    """The loop's own progress. With the trainer, the env and the RNGs it is all a checkpoint
    needs to continue a run as if it had never stopped."""

    judge_calls: int = 0
    failures: int = 0  # judge calls that returned an error (stored, never trained on)
    updates: int = 0
    groups: int = 0
    next_eval: int = 0
    last_checkpoint: int = 0  # `updates` when the last checkpoint was written
    failed_in_a_row: int = 0  # judge calls
    nonfinite_in_a_row: int = 0  # updates skipped for a NaN/inf
    skipped_updates: int = 0
    buffer: list[Trajectory] = field(default_factory=list)  # judged episodes not yet trained on
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=128))  # rolling reward, for the bar
    outages: list[dict[str, int]] = field(default_factory=list)  # {"t", "failed_calls"} per judge outage
    seconds: dict[str, float] = field(default_factory=dict)  # Timer totals
    judge_used: dict[str, float] = field(default_factory=dict)  # judge counters used before a resume
    wall_s: float = 0.0
    pretrain: dict[str, Any] = field(default_factory=dict)
    resumes: int = 0

    def record_verdict(self, verdict_failed: bool, t: int) -> None:
        """Count a judge call; consecutive failures make one outage, reported as a gap at clock t."""
        if not verdict_failed:
            self.failed_in_a_row = 0
            return
        self.failures += 1
        if self.failed_in_a_row == 0:
            self.outages.append({"t": t, "failed_calls": 0})
        self.outages[-1]["failed_calls"] += 1
        self.failed_in_a_row += 1


def run_arm(
    scenario: Scenario,
    arm: ArmConfig,
    seed: int,
    *,
    base_policy: torch.nn.Module,
    tokenizer: WordTokenizer,
    judge: Judge,
    schedule: DriftSchedule,
    store: RunStore,
    progress: Progress | None = None,
    policy_key: str = "",
    log: Callable[[str], None] = print,
    completed: dict[str, dict[str, Any]] | None = None,
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train one arm with one seed for the scenario's episode budget; returns its totals.

    Checkpoints go to the store's run directory at the start, every `checkpoint_every` updates,
    when the run stops on purpose and at the end; `completed` (the totals of the arms x seeds
    already finished) goes into each. `resume` is a checkpoint of this arm x seed to continue."""
    rel = scenario.reliability
    seed_everything(seed)
    budget = scenario.budget.episodes
    policy = copy.deepcopy(base_policy)
    engine = make_engine(scenario, policy, tokenizer)
    trainer = arm.trainer_class()(policy, arm.args, pad_id=tokenizer.pad_id, temperature=scenario.sampling.temperature, seed=seed)
    env = StyleShiftEnv(judge, schedule, prompts("train"), seed=seed)
    env.reset(seed=seed)  # seeds the env's prompt sampler
    env.clock = 0
    heldout = prompts("heldout")[: scenario.eval.prompts]
    state = LoopState()

    def save_checkpoint(*, final: bool = False, totals: dict[str, Any] | None = None) -> None:
        state.last_checkpoint = state.updates
        state.seconds = dict(timer.seconds)
        state.judge_used = counter_delta(judge_start, judge_counters(judge), judge_offset)
        state.wall_s = wall_before + time.perf_counter() - wall
        done = dict(completed or {})
        if totals is not None:
            done[arm.name] = {**done.get(arm.name, {}), str(seed): totals}
        checkpoint.save(store.root, arm.name, seed, {
            "arm": arm.name, "seed": seed, "done": final, "completed": done,
            "trainer": trainer.state_dict(),
            "env": {"clock": env.clock, "np_random": env.np_random.bit_generator.state},
            "rng": checkpoint.rng_state(),
            "loop": {**state.__dict__, "recent": list(state.recent)},
            "store": store.snapshot(),
        }, final=final)

    if resume is not None:
        if (resume["arm"], resume["seed"]) != (arm.name, seed):
            raise ValueError(f"checkpoint is for arm {resume['arm']} seed {resume['seed']}, not {arm.name} seed {seed}")
        trainer.load_state_dict(resume["trainer"])
        env.clock = resume["env"]["clock"]
        env.np_random.bit_generator.state = resume["env"]["np_random"]
        checkpoint.set_rng_state(resume["rng"])
        saved = dict(resume["loop"])
        saved["recent"] = deque(saved["recent"], maxlen=128)
        state = LoopState(**saved)
        state.resumes += 1
        engine.load_weights(None, trainer.version)
        log(f"resuming {arm.name} seed {seed} at t={env.clock} (update {state.updates})")
    elif getattr(trainer, "warmup_samples", 0) > 0:  # an optional trainer hook (SAO: value pretraining)
        cache_key = {"policy": policy_key, "trainer": trainer.warmup_key(), "judge": scenario.judge.model_dump(by_alias=True),
                     "target": schedule.target(0), "sampling": scenario.sampling.model_dump()}
        state.pretrain = warm_up(trainer, env, engine, cache_key, log)
        seed_everything(seed)  # the cache must not change what the RL run samples

    judge_start, judge_offset = judge_counters(judge), dict(state.judge_used)
    timer = Timer(Counter(state.seconds))
    wall, wall_before = time.perf_counter(), state.wall_s
    if resume is None:
        save_checkpoint()
    task: TaskID | None = None
    if progress is not None:
        task = progress.add_task("", total=budget, completed=env.clock, arm=arm.name, seed=seed,
                                 target=schedule.target(min(env.clock, budget - 1)).style, reward="  -  ")

    try:
        while env.clock < budget:
            if env.clock >= state.next_eval:
                with timer.part("eval"):
                    rows, _ = evaluate_heldout(env, engine, heldout, env.clock)
                with timer.part("bookkeeping"):
                    store.append("evals", [{"arm": arm.name, "seed": seed, **r} for r in rows])
                state.next_eval += scenario.eval.every

            group = trainer.group_size
            per_round = max(1, trainer.episodes_per_update // group)
            with timer.part("bookkeeping"):
                starts = env.reset_batch(per_round, repeat=group)[: budget - env.clock]
            with timer.part("generation"):
                trajs = engine.generate([s.prompt_text for s in starts])
            with timer.part("judging"):
                verdicts = env.step_batch(starts, [tr.response_text for tr in trajs])
            if starts:  # judged episodes get consecutive clock values, failed ones the clock they failed at
                starts = [dataclasses.replace(s, t=t) for s, t in zip(starts, env.episode_clocks(starts[0].t, verdicts))]
            with timer.part("bookkeeping"):
                state.judge_calls += len(verdicts)
                for i, (traj, start, verdict) in enumerate(zip(trajs, starts, verdicts)):
                    traj.verdict, traj.t, traj.target_style = verdict, start.t, start.target.style
                    traj.prompt_id, traj.topic, traj.arm, traj.seed = start.prompt_id, start.topic, arm.name, seed
                    traj.group_id = state.groups + i // group
                    state.record_verdict(verdict.error is not None, start.t)
                    if verdict.error is None:
                        state.buffer.append(traj)
                        state.recent.append(verdict.reward)
                state.groups += per_round
                store.append("episodes", episode_rows(arm.name, seed, trajs, starts, trainer.version))
                if state.failed_in_a_row >= rel.judge_failure_budget:
                    save_checkpoint()
                    raise RunStopped(
                        f"arm {arm.name} seed {seed}: the judge failed {state.failed_in_a_row} calls in a row at t={env.clock} "
                        f"(reliability.judge_failure_budget={rel.judge_failure_budget}; last error: {verdicts[-1].error}). "
                        f"A checkpoint was written: continue with --resume {store.root} once the judge is back."
                    )

            while len(state.buffer) >= trainer.episodes_per_update:
                batch, state.buffer = state.buffer[: trainer.episodes_per_update], state.buffer[trainer.episodes_per_update :]
                with timer.part("training"):
                    metrics = trainer.update(batch)
                state.updates += 1
                engine.load_weights(None, trainer.version)  # shared module: only the version moves
                with timer.part("bookkeeping"):
                    row = {"arm": arm.name, "seed": seed, "update": state.updates, "t": env.clock,
                           "judge_calls": state.judge_calls, "judge_failures": state.failures, **metrics,
                           **counter_delta(judge_start, judge_counters(judge), judge_offset)}
                    store.append("updates", [row])
                bad = metrics.get("nonfinite")
                state.nonfinite_in_a_row = state.nonfinite_in_a_row + 1 if bad else 0
                if bad:
                    state.skipped_updates += 1
                    log(f"{arm.name} seed {seed} update {state.updates}: {bad} is NaN/inf; the update was skipped")
                if state.nonfinite_in_a_row >= rel.max_nonfinite_updates:
                    save_checkpoint()
                    raise RunStopped(
                        f"arm {arm.name} seed {seed} update {state.updates}: {bad} was NaN/inf in {state.nonfinite_in_a_row} "
                        f"updates in a row (reliability.max_nonfinite_updates={rel.max_nonfinite_updates}); stopping. "
                        f"The last good state is checkpointed in {store.root / 'checkpoints'}."
                    )

            if state.updates - state.last_checkpoint >= rel.checkpoint_every:
                with timer.part("bookkeeping"):
                    save_checkpoint()
            if progress is not None and task is not None:
                rolling = f"{sum(state.recent) / len(state.recent):.2f}" if state.recent else "  -  "
                progress.update(task, completed=env.clock, target=schedule.target(min(env.clock, budget - 1)).style, reward=rolling)

    except FloatingPointError as exc:  # the policy itself is broken: no checkpoint of this state
        raise RunStopped(f"arm {arm.name} seed {seed} update {state.updates}: {exc}. The last good state is the "
                         f"checkpoint at update {state.last_checkpoint} in {store.root / 'checkpoints'}.") from None

    with timer.part("eval"):
        rows, _ = evaluate_heldout(env, engine, heldout, budget)
    store.append("evals", [{"arm": arm.name, "seed": seed, **r} for r in rows])
    wall_total = wall_before + time.perf_counter() - wall
    totals = {
        "pretrain": state.pretrain,
        "judge": counter_delta(judge_start, judge_counters(judge), judge_offset),
        "episodes": env.clock,
        "judge_calls": state.judge_calls,
        "judge_failures": state.failures,
        "judge_outages": state.outages,
        "updates": state.updates,
        "skipped_updates": state.skipped_updates,
        "resumes": state.resumes,
        "wall_s": round(wall_total, 2),
        "episodes_per_s": round(env.clock / wall_total, 2),
        "time_s": {k: round(v, 3) for k, v in timer.seconds.items()},
    }
    save_checkpoint(final=True, totals=totals)
    return totals
