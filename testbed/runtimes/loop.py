"""The online loop for one arm x seed, and the synchronous runtime (the reference).

    round     <- collector.issue(...)            (the env owns the drift clock and the prompts)
    responses <- env.rollout(engine, round)      (behaviour log-probs recorded; a multi-turn env's turns)
    episodes  <- collector.judge(round, ...)     (the judge sees the target at each clock)
    metrics   <- trainer.update(batch)           (once a full batch of judged episodes is in)
    store.append(episodes, updates, evals)       (every row, as it happens)

`SyncRunner` generates and trains in this process, one round after another, deterministically per
seed. What every runtime shares (`ArmRunner`: the env, the loop state, the rows, evaluation, the
guard, checkpoints) is `testbed.runtimes.runner`; the Ray runtime and the simulated cluster
subclass it too. `run_arm` trains one arm x seed here; `warm_up_job` and `first_jobs` are what
parallel arms need to compute each critic's warm-up once.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.progress import Progress

from testbed import device
from testbed.engines.mismatch import mismatch_probe
from testbed.envs.episode import stream_id
from testbed.models import lora
from testbed.models.sft import cache_root
from testbed.models.tokenizer import WordTokenizer
from testbed.protocols import DriftSchedule, Judge
from testbed.runtimes.bars import make_progress
from testbed.runtimes.learn import RunStopped
from testbed.runtimes.runner import ArmRunner, make_engine, make_trainer, seed_everything
from testbed.scenario.schema import ArmConfig, Scenario
from testbed.store import RunStore
from testbed.types import Trajectory

__all__ = ["ArmRunner", "RunStopped", "SyncRunner", "make_engine", "make_progress", "run_arm", "seed_everything"]


class SyncRunner(ArmRunner):
    """The reference runtime: one process, one round after another, deterministic per seed. The
    engine and the trainer share one policy module, so a new version needs no weight copy; it
    lives on `runtime.device` (the trainer's KL reference and critic are copies of it)."""

    def __init__(
        self,
        scenario: Scenario,
        arm: ArmConfig,
        seed: int,
        *,
        base_policy: torch.nn.Module,
        tokenizer: WordTokenizer,
        **kw: Any,
    ):
        super().__init__(scenario, arm, seed, **kw)
        seed_everything(seed)
        policy = copy.deepcopy(base_policy).to(device.for_this_process(scenario.runtime_for(arm).device))
        # policy.lora: the engine samples through the adapters of the module it shares (no merged copy)
        policy = lora.attach(policy, scenario.policy.lora, seed)
        self.engine = self.eval_engine = make_engine(scenario, policy, tokenizer)
        self.trainer = make_trainer(arm, policy, tokenizer, scenario, seed)
        self.probe = mismatch_probe(scenario, policy, tokenizer, self.trainer)

    def measure_mismatch(self, batch: list[Trajectory]) -> dict[str, float]:
        """The engine's log-probs against the trainer's on the weights that generated the batch
        (before the update), where `engine.mismatch` is on."""
        if self.probe is None:
            return {}
        with self.timer.part("mismatch"):
            return self.probe(batch, self.trainer.version)

    def estimate_baselines(self, starts: list[Any], trajs: list[Trajectory]) -> None:
        """A trainer that asks for `baseline_samples` k (the upper-bound baseline) gets, on each judged
        episode, the mean reward of k more samples of its prompt from the same policy: judged at the
        episode's own target without moving the clock (counted as `baseline_judge_calls`), never
        trained on. Their streams are the episode's (common to the arms of a seed)."""
        k = int(getattr(self.trainer, "baseline_samples", 0) or 0)
        if not k:
            return
        extra = [
            dataclasses.replace(s, stream=None if s.stream is None else stream_id(s.stream, "baseline", j))
            for s in starts
            for j in range(k)
        ]
        with self.timer.part("generation"):
            samples = self.env.rollout(self.engine, extra)
        with self.timer.part("judging"):
            verdicts = self.env.evaluate_batch(extra, [t.response_text for t in samples])
        self.state.baseline_judge_calls += len(verdicts)
        for i, traj in enumerate(trajs):
            ok = [v.reward for v in verdicts[i * k : (i + 1) * k] if v.error is None]
            traj.baseline_reward = sum(ok) / len(ok) if ok else None

    def loop(self) -> None:
        trainer, state = self.trainer, self.state
        per_round = max(1, trainer.episodes_per_update // trainer.group_size)
        while self.env.clock < self.budget:
            self.evaluate_if_due()
            with self.timer.part("bookkeeping"):
                round_ = self.collector.issue(per_round, state.groups)
            with self.timer.part("generation"):
                trajs = self.env.rollout(self.engine, round_.starts)
            with self.timer.part("judging"):
                trajs = self.collector.judge(round_, trajs)
            self.estimate_baselines(round_.starts, trajs)  # only for a trainer with baseline_samples
            self.record_round(trajs)
            while (batch := self.next_batch()) is not None:
                self.record_trained(batch)
                mismatch = self.measure_mismatch(batch)
                with self.timer.part("training"):
                    metrics = trainer.update(batch)
                self.engine.load_weights(None, trainer.version)  # hf shares the module: only the version moves
                self.record_update(
                    {**metrics, **mismatch, **getattr(self.engine, "last_sync", {})}
                )  # a copying engine's sync
            self.show_progress()


def warm_up_job(
    scenario: Scenario,
    arm: ArmConfig,
    seed: int,
    *,
    base_policy: torch.nn.Module,
    tokenizer: WordTokenizer,
    judge: Judge,
    schedule: DriftSchedule,
    policy_key: str,
    log: Callable[[str], None] = print,
    progress: Any = None,
) -> dict[str, bytes]:
    """What job (arm, seed) computes before RL when it runs first: its trainer's warm-up, exactly
    as `run_arm` computes it (or finds it in the cache), with its bars in `progress`. Returns the
    cache file, name -> bytes (empty for a trainer without a warm-up)."""

    with tempfile.TemporaryDirectory(prefix="testbed-warmup-") as scratch:
        runner = SyncRunner(
            scenario,
            arm,
            seed,
            base_policy=base_policy,
            tokenizer=tokenizer,
            judge=judge,
            schedule=schedule,
            store=RunStore(Path(scratch)),
            progress=progress,
            log=log,
            completed=None,
        )
        try:
            runner.warm_up(policy_key, runner.engine)
        finally:
            runner.env.close()
    name = runner.state.pretrain.get("cache_file")
    return {name: (cache_root() / name).read_bytes()} if name else {}


def first_jobs(
    scenario: Scenario, jobs: list[tuple[ArmConfig, int]], key: Callable[[int], str] = lambda seed: ""
) -> list[tuple[ArmConfig, int]]:
    """Each synchronous arm's first job (per starting policy, `key(seed)`) whose trainer has a
    warm-up: the one that computes it when the jobs run one after another. (Raced by parallel
    tasks instead, each seed would pretrain its own critic from its own random stream.)"""
    seen: set[tuple[str, str]] = set()
    out = []
    for arm, seed in jobs:
        if (arm.name, key(seed)) in seen or scenario.runtime_for(arm).kind != "sync":
            continue
        seen.add((arm.name, key(seed)))
        if hasattr(arm.trainer_class(), "warmup_samples"):  # the optional trainer hook
            out.append((arm, seed))
    return out


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
    """Train one arm with one seed for the scenario's episode budget in this process; returns its
    totals. Checkpoints go to the store's run directory at the start, every `checkpoint_every`
    updates, when the run stops on purpose and at the end; `resume` is a checkpoint to continue."""
    runner = SyncRunner(
        scenario,
        arm,
        seed,
        base_policy=base_policy,
        tokenizer=tokenizer,
        judge=judge,
        schedule=schedule,
        store=store,
        progress=progress,
        log=log,
        completed=completed,
    )
    runner.start(resume, policy_key, runner.engine)
    if resume is not None:
        runner.engine.load_weights(None, runner.trainer.version)
    return runner.run()
