"""Learn and guard: the pieces around a trainer update that both runtimes share.

- `LoopState`: the loop's own progress; with the trainer, the env and the RNGs it is all a
  checkpoint needs to continue a run as if it had never stopped.
- `update_row`: one trainer update's metrics row for `updates.parquet`, with the loop's own judge
  counts (training and evaluation calls) kept apart from a judge's own counters (`llm_*`).
- `take_batch`: the next full batch off the queue, less the episodes older than `runtime.max_staleness`.
- `Guard`: the judge-failure and NaN/inf budgets; past either, or at the first verdict whose judge
  was refused (`testbed.types.judge_refused`: no balance, a rejected key), the run stops with a
  checkpoint (`RunStopped`) that `--resume` continues.
- `warm_up`: a trainer's optional warm-up (SAO: value pretraining), cached by what determines it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from testbed.paths import source_fingerprint
from testbed.protocols import Judge
from testbed.scenario.schema import ArmConfig, ReliabilityConfig, Scenario, WorldConfig
from testbed.types import Trajectory, judge_refused


class RunStopped(RuntimeError):
    """The loop stopped on purpose (a judge outage, numerical trouble, a lost learner) after
    writing a checkpoint that `--resume` continues from."""


class JudgeRefused(RuntimeError):
    """A verdict whose judge was refused (`judge_refused`) before the loop began (a warm-up, the
    reference evaluation): the runner stops the run with it."""


def refusal(errors: Sequence[str | None]) -> str | None:
    """The first refusal among verdict errors, if any."""
    return next((e for e in errors if judge_refused(e)), None)


def stop_if_refused(verdicts: list[Any]) -> None:
    """Raise JudgeRefused at a refused verdict (where a stage would otherwise drop it as failed)."""
    refused = refusal([v.error for v in verdicts])
    if refused is not None:
        raise JudgeRefused(refused)


@dataclass
class LoopState:
    """The loop's own progress (see the module docstring)."""

    judge_calls: int = 0  # training judge calls, failed ones included
    failures: int = 0  # training judge calls that returned an error (stored, never trained on)
    eval_judge_calls: int = 0
    eval_failures: int = 0
    updates: int = 0
    groups: int = 0
    next_eval: int = 0
    last_checkpoint: int = 0  # `updates` when the last checkpoint was written
    failed_in_a_row: int = 0  # judge calls, training and evaluation alike
    in_outage: bool = False  # the last training verdict failed (an outage record is open)
    nonfinite_in_a_row: int = 0  # updates skipped for a NaN/inf
    skipped_updates: int = 0
    dropped_stale: int = 0  # judged episodes dropped at dequeue for being too stale (runtime.max_staleness)
    buffer: list[Trajectory] = field(default_factory=list)  # judged episodes not yet trained on
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=128))  # rolling reward, for the bar
    outages: list[dict[str, int]] = field(default_factory=list)  # {"t", "failed_calls"} per judge outage
    seconds: dict[str, float] = field(default_factory=dict)  # Timer totals
    judge_used: dict[str, float] = field(default_factory=dict)  # judge counters used before a resume
    wall_s: float = 0.0
    baseline_judge_calls: int = 0  # judge calls on samples drawn only to estimate a baseline (never trained on)
    cpu_s: float = 0.0  # this process's CPU time on the arm x seed (a Ray runtime's actors not included)
    pretrain: dict[str, Any] = field(default_factory=dict)
    resumes: int = 0

    def record(self, trajs: list[Trajectory]) -> list[Trajectory]:
        """Count a judged round; returns the episodes to train on (those without a judge error).
        Consecutive failures make one outage, reported as a gap at the clock where it began."""
        self.judge_calls += sum(traj.judge_calls() for traj in trajs)  # a multi-turn editor's reads too
        self.failures += sum(v.error is not None for traj in trajs for v in traj.turn_verdicts)
        judged = []
        for traj in trajs:
            assert traj.verdict is not None
            if traj.verdict.error is None:
                self.failed_in_a_row, self.in_outage = 0, False
                self.recent.append(traj.verdict.reward)
                judged.append(traj)
                continue
            self.failures += 1
            if not self.in_outage:
                self.outages.append({"t": traj.t, "failed_calls": 0})
                self.in_outage = True
            self.outages[-1]["failed_calls"] += 1
            self.failed_in_a_row += 1
        return judged

    def record_eval(self, calls: int, failed: int) -> None:
        """Evaluation calls count toward the failure budget too: a judge that fails them is down."""
        self.eval_judge_calls += calls
        self.eval_failures += failed
        if failed == calls:
            self.failed_in_a_row += failed
        else:
            self.failed_in_a_row, self.in_outage = 0, False

    def to_checkpoint(self) -> dict[str, Any]:
        return {**self.__dict__, "recent": list(self.recent)}

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any]) -> LoopState:
        saved = dict(saved)
        saved["recent"] = deque(saved["recent"], maxlen=128)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in saved.items() if k in known})


def judge_counters(judge: Judge) -> dict[str, float]:
    """The judge's own cumulative accounting, if it keeps any (LLM judges do), under `llm_`
    names, so they can never overwrite the loop's `judge_*` counts; and a judge panel's verdicts
    per judge (`judge_calls_<name>`, every kind of call)."""
    stats = getattr(judge, "stats", None)
    out = {f"llm_{k}": float(v) for k, v in stats().items()} if callable(stats) else {}
    by_judge = getattr(judge, "calls_by_judge", None)  # a JudgePanel: a schedule that changes the judge
    if callable(by_judge):
        out.update({f"judge_calls_{name}": float(n) for name, n in by_judge().items()})
    return out


def counter_delta(
    start: dict[str, float], now: dict[str, float], offset: dict[str, float] | None = None
) -> dict[str, float]:
    """This arm's share of a judge's cumulative counters (latency percentiles are kept as they
    are), plus what it had used before a resume (`offset`)."""
    offset = offset or {}
    return {k: (v - start.get(k, 0.0) + offset.get(k, 0.0)) if "latency" not in k else v for k, v in now.items()}


def update_row(
    arm: str, seed: int, state: LoopState, t: int, metrics: dict[str, Any], judge_used: dict[str, float]
) -> dict:
    return {
        "arm": arm,
        "seed": seed,
        "update": state.updates,
        "t": t,
        "judge_calls": state.judge_calls,
        "judge_failures": state.failures,
        "eval_judge_calls": state.eval_judge_calls,
        "eval_judge_failures": state.eval_failures,
        # what the trainer's warm-up spent before RL (SAO's value pretraining), so every arm's calls are counted
        "warmup_judge_calls": int(state.pretrain.get("judge_calls", 0)),
        **({"baseline_judge_calls": state.baseline_judge_calls} if state.baseline_judge_calls else {}),
        **metrics,
        **judge_used,
    }


def take_batch(
    queue: list[Trajectory], size: int, version: int, max_staleness: int | None
) -> tuple[list[Trajectory] | None, list[Trajectory]]:
    """(the next batch of `size` episodes, the episodes dropped on the way), popped from the head of
    `queue` in place. An episode more than `max_staleness` versions behind `version` is dropped
    (None: none is). Short of a full batch, its episodes go back to the head, in order, and the
    batch is None; the dropped stay dropped."""
    batch: list[Trajectory] = []
    dropped: list[Trajectory] = []
    while queue and len(batch) < size:
        traj = queue.pop(0)
        if max_staleness is not None and version - traj.policy_version > max_staleness:
            dropped.append(traj)
        else:
            batch.append(traj)
    if len(batch) < size:
        queue[:0] = batch
        return None, dropped
    return batch, dropped


class Guard:
    """The failure budgets of `reliability`. Each check returns None or the reason to stop; the
    runtime then writes a checkpoint and raises `RunStopped` with it."""

    def __init__(self, rel: ReliabilityConfig, arm: str, seed: int, root: Any, log: Callable[[str], None]):
        self.rel, self.arm, self.seed, self.root, self.log = rel, arm, seed, root, log

    def judge(self, state: LoopState, t: int, last_error: str | None) -> str | None:
        if judge_refused(last_error):  # no retry can change it: stop at the first one
            return (
                f"arm {self.arm} seed {self.seed}: {last_error} (at t={t}). "
                f"A checkpoint was written: continue with --resume {self.root} once the key works."
            )
        if state.failed_in_a_row < self.rel.judge_failure_budget:
            return None
        return (
            f"arm {self.arm} seed {self.seed}: the judge failed {state.failed_in_a_row} calls in a row at t={t} "
            f"(reliability.judge_failure_budget={self.rel.judge_failure_budget}; last error: {last_error}). "
            f"A checkpoint was written: continue with --resume {self.root} once the judge is back."
        )

    def numerics(self, state: LoopState, metrics: dict[str, Any]) -> str | None:
        bad = metrics.get("nonfinite")
        state.nonfinite_in_a_row = state.nonfinite_in_a_row + 1 if bad else 0
        if bad:
            state.skipped_updates += 1
            self.log(f"{self.arm} seed {self.seed} update {state.updates}: {bad} is NaN/inf; the update was skipped")
        if state.nonfinite_in_a_row < self.rel.max_nonfinite_updates:
            return None
        return (
            f"arm {self.arm} seed {self.seed} update {state.updates}: {bad} was NaN/inf in {state.nonfinite_in_a_row} "
            f"updates in a row (reliability.max_nonfinite_updates={self.rel.max_nonfinite_updates}); stopping. "
            f"The last good state is checkpointed in {self.root / 'checkpoints'}."
        )


def warm_up(
    trainer: Any,
    samples: Callable[[int], list[Trajectory]],
    cache_key: dict,
    log: Callable[[str], None],
    on_step: Callable[..., None] | None = None,
) -> dict:
    """A trainer's warm-up on `warmup_samples` judged samples from the fixed starting policy (SAO:
    value pretraining), cached by everything that determines its result. `trainer` may be a
    remote learner with the same hook methods. `on_step` goes to a `warmup` that takes it (the
    hook's optional argument: a plugin trainer's may not)."""
    path = warmup_cache_path(cache_key)
    if path.exists():
        saved = torch.load(
            path, weights_only=False, map_location="cpu"
        )  # load_warmup_state moves it to the critic's device
        trainer.load_warmup_state(saved["state"])
        return {**saved["report"], "cached": str(path), "cache_file": path.name}
    n = trainer.warmup_samples
    who = type(getattr(trainer, "shadow", trainer)).__name__  # a remote learner's local shadow names the trainer
    log(f"{who} warm-up on {n} judged samples from the starting policy (cached as {path})")
    started = time.perf_counter()
    trajs = samples(n)
    report = {
        **trainer.warmup(trajs, **({"on_step": on_step} if on_step and takes(trainer.warmup, "on_step") else {})),
        "judge_calls": n + sum(len(t.turn_verdicts) for t in trajs),
        "seconds": round(time.perf_counter() - started, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"state": trainer.warmup_state(), "report": report}, tmp)
    os.replace(tmp, path)
    return {**report, "cache_file": path.name}


def takes(method: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):  # a builtin or a remote method: no signature to read
        return False


def warmup_cache_key(
    scenario: Scenario, arm: ArmConfig, trainer_key: dict[str, Any], schedule: Any, policy_key: str
) -> dict:
    """Everything a trainer's warm-up result depends on: the starting policy, the trainer's own
    `warmup_key()`, the judge, the first target, sampling, and the env and world where they differ
    from the defaults (only then, so existing caches keep their keys)."""
    key = {
        "policy": policy_key,
        "trainer": trainer_key,
        "judge": scenario.judge.model_dump(by_alias=True),
        "code": source_fingerprint(
            "trainers", "testbed/engines", "testbed/runtimes/learn.py"
        ),  # policy_key has the models
        "target": schedule.target(0),
        "sampling": scenario.sampling.model_dump(),
    }
    first = getattr(schedule, "judge_at", lambda t: "default")(0)
    if first in scenario.judges:  # a schedule whose first judge is not the scenario's `judge`: that one's
        key["judge"] = scenario.judges[first].model_dump(by_alias=True)
    if scenario.env.type != "style_shift":
        key["env"] = scenario.env_for(arm).model_dump()
    world = scenario.world.model_dump(include={"hard_topics", "noisy_topics", "candidate_change_share"})
    if world != WorldConfig().model_dump(include=set(world)):
        key["world"] = world
    from testbed.device import resolve

    placed = resolve(scenario.runtime_for(arm).device).type
    if placed != "cpu":  # a GPU's rounding gives another critic; only then, so existing caches keep their keys
        key["device"] = placed
    return key


def warmup_cache_path(cache_key: dict) -> Path:
    """Where the warm-up with this key is cached (beside the SFT policies)."""
    from testbed.models.sft import cache_root

    key = hashlib.sha256(json.dumps(cache_key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return cache_root() / f"critic-{key}.pt"
