"""What every runtime shares for one arm x seed (`ArmRunner`): the env and its collector, the loop
state, the store rows, held-out evaluation, the failure guard and the checkpoints. How an arm's
engine, env and trainer are built (like every plugin, through the registry) is
`testbed.runtimes.building`, importable from here too.

Runtimes subclass `ArmRunner` with their `loop()`: the synchronous loop (`testbed.runtimes.loop`),
the Ray runtime (`testbed.runtimes.ray`) and the simulated cluster (`testbed.runtimes.simulated`).
Episodes whose verdict carries a judge error are stored and counted but never trained on; they do
not move the clock, so an outage is a gap in attempts, never zeros in the reward curve. A judge
that keeps failing, or NaN/inf updates that keep coming, stop the run with a checkpoint
(`RunStopped`); `--resume RUN_DIR` continues it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from rich.progress import Progress, TaskID

from testbed.judging.build import build_gold_judge
from testbed.models.lora import has_adapters
from testbed.models.modules import describe_split, parameter_split
from testbed.protocols import DriftSchedule, Engine, Judge
from testbed.runtimes import checkpoint
from testbed.runtimes.bars import StepBar
from testbed.runtimes.building import make_engine, make_env, make_trainer, seed_everything
from testbed.runtimes.collect import Collector, Timer, dropped_rows, episode_rows, evaluate_heldout, judged_samples
from testbed.runtimes.learn import (
    Guard,
    JudgeRefused,
    LoopState,
    RunStopped,
    counter_delta,
    judge_counters,
    refusal,
    take_batch,
    update_row,
    warm_up,
    warmup_cache_key,
)
from testbed.runtimes.reference_policy import reference_rows, settled_judges
from testbed.scenario.schema import ArmConfig, Scenario
from testbed.store import RunStore
from testbed.types import Trajectory
from testbed.world import prompts

__all__ = ["ArmRunner", "RunStopped", "make_engine", "make_env", "make_trainer", "seed_everything"]


class ArmRunner:
    """One arm x seed: what both runtimes share. Subclasses provide `trainer` (or a proxy with
    the same `state_dict`/`version`/`episodes_per_update`/`group_size`), `eval_engine`, and `loop()`."""

    trainer: Any
    eval_engine: Engine

    def __init__(
        self,
        scenario: Scenario,
        arm: ArmConfig,
        seed: int,
        *,
        judge: Judge,
        schedule: DriftSchedule,
        store: RunStore,
        progress: Progress | None,
        log: Callable[[str], None],
        completed: dict | None = None,  # the run's finished arms x seeds (for its checkpoints); none in a task
    ):
        self.scenario, self.arm, self.seed, self.judge, self.schedule = scenario, arm, seed, judge, schedule
        self.store, self.progress, self.log, self.completed = store, progress, log, completed or {}
        self.budget = scenario.budget.episodes
        self.env = make_env(scenario, arm, judge, schedule, seed)
        self.env.reset(seed=seed)  # seeds the env's prompt sampler
        self.env.clock = 0
        self.heldout = prompts("heldout")[: scenario.eval.prompts]
        self.state = LoopState()
        self.max_staleness = scenario.runtime_for(arm).staleness_limit()  # applied at dequeue (`next_batch`)
        self.guard = Guard(scenario.reliability, arm.name, seed, store.root, log)
        self.task: TaskID | None = None

    # -- start, resume, warm-up ------------------------------------------------------------------

    def start(self, resume: dict[str, Any] | None, policy_key: str, starting_engine: Engine) -> None:
        """Restore a checkpoint of this arm x seed, or run the trainer's warm-up; then start the
        clocks, write the first checkpoint and the progress bar."""
        if resume is not None:
            self.restore(resume)
        else:
            try:
                self.warm_up(policy_key, starting_engine)
                self.evaluate_reference(starting_engine)
            except JudgeRefused as exc:  # nothing of this arm x seed is trained yet: a resume starts it again
                raise RunStopped(
                    f"arm {self.arm.name} seed {self.seed}: {exc} (before training). "
                    f"Continue with --resume {self.store.root} once the key works."
                ) from None
            seed_everything(self.seed)  # the warm-up (or its cache) must not change what RL samples
        self.log_parameter_split()

        self.gold = build_gold_judge(self.scenario)
        self.collector = Collector(
            self.env,
            self.arm.name,
            self.seed,
            self.trainer.group_size,
            self.budget,
            gold=self.gold,
            gold_share=self.scenario.gold_judge.share if self.scenario.gold_judge else 1.0,
        )
        self.judge_start, self.judge_offset = judge_counters(self.judge), dict(self.state.judge_used)
        self.timer = Timer(defaultdict(float, self.state.seconds))
        self.wall, self.wall_before = time.perf_counter(), self.state.wall_s
        self.cpu, self.cpu_before = time.process_time(), self.state.cpu_s
        if resume is None:
            self.save_checkpoint()
        if self.progress is not None:
            self.task = self.progress.add_task(
                "",
                total=self.budget,
                completed=self.env.clock,
                arm=self.arm.name,
                seed=self.seed,
                target=self.target_now(),
                reward="  -  ",
            )

    def parameter_split(self) -> dict[str, int] | None:
        """The trainer's split of trainable parameters (SAO: its critic's attention, experts, router,
        head), if it reports one (`parameter_counts`; a remote learner's local shadow has it)."""
        return getattr(getattr(self.trainer, "shadow", self.trainer), "parameter_counts", None)

    def policy_split(self) -> dict[str, int] | None:  # a LoRA policy's: its adapters train, its base not
        policy = getattr(getattr(self.trainer, "shadow", self.trainer), "policy", None)
        return parameter_split(policy) if has_adapters(policy) else None

    def log_parameter_split(self) -> None:
        counts = self.parameter_split()
        if counts:
            self.log(f"{self.arm.name} seed {self.seed}: {describe_split(counts)}")
        if policy := self.policy_split():
            self.log(f"{self.arm.name} seed {self.seed}: policy (LoRA) {describe_split(policy)}")

    def warm_up(self, policy_key: str, starting_engine: Engine) -> None:
        """The trainer's optional warm-up (SAO: value pretraining) on samples of the starting
        policy, or its cached result: the first arm x seed with a given key computes it, the
        others load it."""
        if getattr(self.trainer, "warmup_samples", 0) <= 0:
            return
        key = warmup_cache_key(self.scenario, self.arm, self.trainer.warmup_key(), self.schedule, policy_key)
        sampled, fitted = self.warm_up_bars()
        samples = lambda n: judged_samples(self.env, starting_engine, prompts("train"), n, seed=0, on_step=sampled)  # noqa: E731
        self.state.pretrain = warm_up(self.trainer, samples, key, self.log, on_step=fitted)

    def warm_up_bars(self) -> tuple[StepBar | None, StepBar | None]:
        """The warm-up's two bars, drawn only if it runs (a cached one has no steps): its judged
        samples, then its own steps (SAO's critic regression)."""
        if self.progress is None:
            return None, None
        return (
            StepBar(self.progress, f"{self.arm.name} samples", self.seed, unit="sample"),
            StepBar(self.progress, f"{self.arm.name} warm-up", self.seed),
        )

    def evaluate_reference(self, starting_engine: Engine) -> None:
        """The arm-independent reference per phase: the starting policy told the target
        (`testbed.runtimes.reference_policy`), written to the `reference` table."""
        if self.scenario.eval.reference_samples <= 0:
            return
        switches = list(self.schedule.switch_points())
        rows = reference_rows(
            self.env,
            starting_engine,
            self.heldout,
            switches,
            self.budget,
            self.scenario.eval.reference_samples,
            self.seed,
            judges=settled_judges(self.schedule, switches, self.budget),
        )
        self.store.append("reference", [{"arm": self.arm.name, "seed": self.seed, **r} for r in rows])

    def restore(self, resume: dict[str, Any]) -> None:
        if (resume["arm"], resume["seed"]) != (self.arm.name, self.seed):
            raise ValueError(
                f"checkpoint is for arm {resume['arm']} seed {resume['seed']}, not {self.arm.name} seed {self.seed}"
            )
        self.trainer.load_state_dict(resume["trainer"])
        self.env.clock = resume["env"]["clock"]
        self.env.np_random.bit_generator.state = resume["env"]["np_random"]
        checkpoint.set_rng_state(resume["rng"])
        self.state = LoopState.from_checkpoint(resume["loop"])
        self.state.resumes += 1
        self.log(f"resuming {self.arm.name} seed {self.seed} at t={self.env.clock} (update {self.state.updates})")

    # -- bookkeeping shared by every runtime ----------------------------------------------------

    def judge_used(self) -> dict[str, float]:
        return counter_delta(self.judge_start, judge_counters(self.judge), self.judge_offset)

    def save_checkpoint(self, *, final: bool = False, totals: dict[str, Any] | None = None) -> None:
        state = self.state
        state.last_checkpoint = state.updates
        state.seconds = dict(self.timer.seconds)
        state.judge_used = self.judge_used()
        state.wall_s = self.wall_before + time.perf_counter() - self.wall
        state.cpu_s = self.cpu_before + time.process_time() - self.cpu
        done = dict(self.completed)
        if totals is not None:
            done[self.arm.name] = {**done.get(self.arm.name, {}), str(self.seed): totals}
        checkpoint.save(
            self.store.root,
            self.arm.name,
            self.seed,
            {
                "arm": self.arm.name,
                "seed": self.seed,
                "done": final,
                "completed": done,
                "trainer": self.trainer.state_dict(),
                "env": {"clock": self.env.clock, "np_random": self.env.np_random.bit_generator.state},
                "rng": checkpoint.rng_state(),
                "loop": state.to_checkpoint(),
                "store": self.store.snapshot(),
                **self.checkpoint_extra(),
            },
            final=final,
        )

    def checkpoint_extra(self) -> dict[str, Any]:
        """A runtime's own state beside the shared one (the simulated cluster's), restored by `restore`."""
        return {}

    def stop(self, reason: str | None) -> None:
        """Past a failure budget: checkpoint, then stop the run. The episodes judged but not yet
        trained are in the checkpoint (a resume trains them); their rows are written after it, so
        the run directory holds every judged episode and a resume discards those rows."""
        if reason is not None:
            self.save_checkpoint()
            self.record_untrained(self.state.buffer)
            raise RunStopped(reason)

    def evaluate_if_due(self, t: int | None = None) -> None:
        if t is None and self.env.clock < self.state.next_eval:
            return
        clock = self.env.clock if t is None else t
        with self.timer.part("eval"):
            rows, errors, calls = evaluate_heldout(self.env, self.eval_engine, self.heldout, clock)
        self.state.record_eval(calls, len(errors))
        with self.timer.part("bookkeeping"):
            self.store.append("evals", [{"arm": self.arm.name, "seed": self.seed, **r} for r in rows])
        if t is None:
            self.state.next_eval += self.scenario.eval.every
        error = refusal(errors) or (f"held-out evaluation: {errors[-1]}" if errors else None)
        self.stop(self.guard.judge(self.state, clock, error))

    def record_round(self, trajs: list[Trajectory]) -> None:
        """Queue a judged round's episodes for training (their rows are written when they are
        trained, with their staleness then), store the failed ones, apply the judge budget."""
        with self.timer.part("bookkeeping"):
            self.state.buffer += self.state.record(trajs)
            self.state.groups = max([self.state.groups, *(t.group_id + 1 for t in trajs)])
            failed = [t for t in trajs if t.verdict is not None and t.verdict.error is not None]
            if failed:
                self.store.append("episodes", episode_rows(failed, None))
        errors = [v.error for t in trajs for v in (t.verdict, *t.turn_verdicts) if v is not None]
        verdict = trajs[-1].verdict if trajs else None
        last_error = refusal(errors) or (verdict.error if verdict is not None else None)
        self.stop(self.guard.judge(self.state, self.env.clock, last_error))

    def next_batch(self) -> list[Trajectory] | None:
        """The next full batch to train on, or None. Episodes older than `runtime.max_staleness` are
        dropped on the way: stored with their staleness (and in `dropped`), never trained on."""
        version = self.trainer.version
        batch, dropped = take_batch(self.state.buffer, self.trainer.episodes_per_update, version, self.max_staleness)
        if dropped:
            self.requeue(dropped)
            self.state.dropped_stale += len(dropped)
            self.record_untrained(dropped, version)
            self.store.append("dropped", dropped_rows(dropped, version))
        return batch

    def requeue(self, dropped: list[Trajectory]) -> None:
        """What a runtime does with the prompts of episodes dropped as too stale (none here)."""

    def record_trained(self, batch: list[Trajectory]) -> None:
        """The rows of a batch the trainer is about to train on, with each episode's staleness."""
        with self.timer.part("bookkeeping"):
            self.store.append("episodes", episode_rows(batch, self.trainer.version, trained=True))

    def record_untrained(self, trajs: list[Trajectory], learner_version: int | None = None) -> None:
        """Rows of judged episodes never trained on: dropped as too stale (at `learner_version`) or
        left over at the end."""
        if trajs:
            self.store.append("episodes", episode_rows(trajs, learner_version))

    def record_update(self, metrics: dict[str, Any]) -> None:
        """Store one update's row (with the drops so far, under a staleness bound), apply the NaN/inf
        budget, checkpoint when due."""
        if self.max_staleness is not None:
            metrics = {**metrics, "dropped_stale_total": self.state.dropped_stale}
        self.state.updates += 1
        with self.timer.part("bookkeeping"):
            self.store.append(
                "updates",
                [update_row(self.arm.name, self.seed, self.state, self.env.clock, metrics, self.judge_used())],
            )
        self.stop(self.guard.numerics(self.state, metrics))
        if self.state.updates - self.state.last_checkpoint >= self.scenario.reliability.checkpoint_every:
            with self.timer.part("bookkeeping"):
                self.save_checkpoint()

    def target_now(self) -> str:
        return self.schedule.target(min(self.env.clock, self.budget - 1)).style

    def show_progress(self) -> None:
        if self.progress is not None and self.task is not None:
            recent = self.state.recent
            rolling = f"{sum(recent) / len(recent):.2f}" if recent else "  -  "
            self.progress.update(self.task, completed=self.env.clock, target=self.target_now(), reward=rolling)

    def run(self) -> dict[str, Any]:
        """The loop, a last evaluation, the totals and the final checkpoint."""
        try:
            self.loop()
            self.evaluate_if_due(self.budget)
            self.record_untrained(self.state.buffer)  # fewer than a batch left: judged, never trained
            self.state.buffer = []
        except FloatingPointError as exc:  # the policy itself is broken: no checkpoint of this state
            raise RunStopped(
                f"arm {self.arm.name} seed {self.seed} update {self.state.updates}: {exc}. The last good state "
                f"is the checkpoint at update {self.state.last_checkpoint} in {self.store.root / 'checkpoints'}."
            ) from None
        finally:
            self.env.close()  # the env's event loop (the judge's async clients live on it)
            close = getattr(self.gold, "close", None)
            if callable(close):
                close()
        totals = self.totals()
        self.save_checkpoint(final=True, totals=totals)
        return totals

    def loop(self) -> None:
        raise NotImplementedError

    def totals(self) -> dict[str, Any]:
        state, wall_total = self.state, self.wall_before + time.perf_counter() - self.wall
        return {
            "pretrain": state.pretrain,
            "judge": self.judge_used(),
            "episodes": self.env.clock,
            "judge_calls": state.judge_calls,
            **({"baseline_judge_calls": state.baseline_judge_calls} if state.baseline_judge_calls else {}),
            "judge_failures": state.failures,
            "eval_judge_calls": state.eval_judge_calls,
            "eval_judge_failures": state.eval_failures,
            "judge_outages": state.outages,
            "updates": state.updates,
            "skipped_updates": state.skipped_updates,
            "dropped_stale": state.dropped_stale,
            "resumes": state.resumes,
            "wall_s": round(wall_total, 2),
            "cpu_s": round(self.cpu_before + time.process_time() - self.cpu, 2),  # the planner's cost (analysis.power)
            "episodes_per_s": round(self.env.clock / wall_total, 2),
            "time_s": {k: round(v, 3) for k, v in self.timer.seconds.items()},
            **({"parameters": split} if (split := self.parameter_split()) else {}),
            **({"policy_parameters": policy} if (policy := self.policy_split()) else {}),
        }
