"""A scenario's world, judge and drift schedule behind one clock, for a trainer that is not the
testbed's own (TRL's GRPOTrainer, OpenRLHF through a remote reward, verl's reward loop).

`DriftSession` holds what a testbed run holds for one arm x seed (the env, with the scenario's judge
or judge panel and schedule; the run directory), minus the trainer and the policy. The caller hands
it prompts and responses; it judges them at the clock's next values, advances the clock by the
judged ones (a failed verdict is stored, counted and excluded, never a zero), and writes the same
`episodes` rows a run writes. With a way to sample the policy (an Engine) it also writes the
held-out `evals` and the `reference` table, so `python -m analysis.report RUN_DIR` reads the
directory as it reads a testbed run's. The clock is the session's (judged completions), or the
caller's (`t0`, e.g. TRL's global step times the completions per step).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed import registry
from testbed.envs.episode import EpisodeStart, SingleTurn
from testbed.judging.build import build_judge
from testbed.runtimes.collect import episode_rows, evaluate_heldout
from testbed.runtimes.dispatch import resolved_dict
from testbed.runtimes.learn import counter_delta, judge_counters
from testbed.runtimes.reference_policy import reference_rows, settled_judges
from testbed.scenario.schema import Scenario, ScenarioError, load_scenario
from testbed.store import RunStore, base_manifest
from testbed.types import Segment, Target, Trajectory, Verdict
from testbed.world import prompts
from testbed.world.prompts import topic_of_prompt


class DriftSession:
    """One arm x seed of `scenario` run by an outside trainer into `run_dir` (see the module docstring).

    `scenario`: a Scenario or a scenario file (`overrides` as `--set` takes them). `run_dir`: the run
    directory to create (refused if it exists). `arm` names the rows' arm; `seed` seeds the env's
    prompt sampler (default: the scenario's first seed)."""

    def __init__(
        self,
        scenario: Scenario | str | Path,
        run_dir: str | Path,
        *,
        arm: str = "external",
        seed: int | None = None,
        overrides: list[str] | None = None,
    ) -> None:
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, overrides)
        if self.scenario.schedule.clock != "episodes":
            raise ScenarioError("schedule.clock: an outside trainer's clock counts judged episodes (clock: episodes)")
        self.arm, self.seed = arm, self.scenario.seeds[0] if seed is None else int(seed)
        self.budget = self.scenario.budget.episodes
        self.judge, self.schedule = build_judge(self.scenario), self.scenario.schedule_object()
        self.env = self._env()
        self.heldout = prompts("heldout")[: self.scenario.eval.prompts]
        self.specs = {s.prompt_id: s for s in [*prompts("train"), *prompts("heldout")]}
        run_dir = Path(run_dir)
        output = self.scenario.output
        self.store = RunStore.create(
            run_dir.parent, self.scenario.name, output.flush_rows, output.flush_seconds, run_name=run_dir.name
        )
        self.store.write_scenario(resolved_dict(self.scenario))
        self.manifest = base_manifest(self.scenario.name, [self.seed], self.scenario.digest())
        self.manifest.update(
            switch_points=list(self.schedule.switch_points()), budget=self.budget, trainer="external", arm=arm
        )
        self.store.write_manifest(self.manifest)
        self.counts = {"judge_calls": 0, "judge_failures": 0, "eval_judge_calls": 0, "eval_judge_failures": 0}
        self.updates, self.next_eval, self.groups, self.started = 0, 0, 0, time.time()
        self.judge_start = judge_counters(self.judge)

    def _env(self) -> Any:
        spec, world = self.scenario.env, self.scenario.world
        extra = {"candidate_change_share": world.candidate_change_share} if world.candidate_change_share < 1 else {}
        env = registry.build(
            spec.load(), spec.args, self.judge, self.schedule, prompts("train"), seed=self.seed, **extra
        )
        if not isinstance(env.episode_runner(), SingleTurn):
            raise ScenarioError(f"env.type: {spec.type} is multi-turn; an outside trainer scores one response a prompt")
        env.reset(seed=self.seed)
        env.clock = 0
        return env

    @property
    def clock(self) -> int:
        return self.env.clock

    # -- prompts ---------------------------------------------------------------------------------

    def prompt_rows(self, n: int) -> list[dict[str, str]]:
        """`n` training prompts drawn by the env's sampler, rendered with the candidates in force
        now: {"prompt": text, "prompt_id": id} (a trainer's dataset; the id lets the judge find
        the topic and re-render the prompt at the clock it is judged at)."""
        return [{"prompt": s.prompt_text, "prompt_id": s.prompt_id} for s in self.env.reset_batch(n)]

    def render(self, prompt_id: str, t: int | None = None) -> str:
        """The env's prompt `prompt_id` as the policy reads it at clock t (default: now)."""
        spec = self.spec(prompt_id)
        return self.env.eval_starts([spec], self.clock if t is None else t)[0].prompt_text

    def spec(self, prompt_id: str) -> Any:
        if prompt_id not in self.specs:
            raise ValueError(f"prompt_id {prompt_id!r} is not one of the world's prompts")
        return self.specs[prompt_id]

    # -- judging ---------------------------------------------------------------------------------

    def starts(self, texts: list[str], prompt_ids: Sequence[str | None] | None, t0: int) -> list[EpisodeStart]:
        """Episode starts for prompts the policy read (`texts`), judged at clocks t0, t0 + 1, ...:
        each at the target (and judge) in force at its clock, its topic from its prompt id (or,
        without one, from its text)."""
        ids = list(prompt_ids) if prompt_ids is not None else [None] * len(texts)
        if len(ids) != len(texts):
            raise ValueError(f"got {len(texts)} prompts but {len(ids)} prompt ids")
        unset = Target("", ())  # retarget gives each start the target and judge of its clock
        return [
            self.env.retarget(
                EpisodeStart(text, pid or "", self.spec(pid).topic if pid else (topic_of_prompt(text) or ""), t, unset),
                t,
            )
            for t, (text, pid) in enumerate(zip(texts, ids), start=t0)
        ]

    def judge_batch(
        self,
        texts: list[str],
        responses: list[str],
        prompt_ids: Sequence[str | None] | None = None,
        *,
        t0: int | None = None,
        version: int = 0,
        group_size: int = 1,
        tokens: list[list[int]] | None = None,
    ) -> list[Verdict]:
        """Judge `responses` to `texts` at clocks t0, t0 + 1, ... (default t0: the session's clock);
        the clock then stands after the judged ones. Writes their episode rows (`tokens`: each
        response's token ids, where the caller has them)."""
        starts, t0 = self._starts_at(texts, prompt_ids, t0)
        verdicts = self.env.step_batch(starts, list(responses))
        self.record(starts, list(responses), verdicts, t0, version, group_size, tokens)
        return verdicts

    async def ajudge(
        self,
        texts: list[str],
        responses: list[str],
        prompt_ids: Sequence[str | None] | None = None,
        *,
        t0: int | None = None,
        version: int = 0,
    ) -> list[Verdict]:
        """`judge_batch` for async code (a web server's handler), on the caller's event loop."""
        starts, t0 = self._starts_at(texts, prompt_ids, t0)
        verdicts = await self.env.astep_batch(starts, list(responses))
        self.record(starts, list(responses), verdicts, t0, version, 1, None)
        return verdicts

    def _starts_at(
        self, texts: list[str], prompt_ids: Sequence[str | None] | None, t0: int | None
    ) -> tuple[list[EpisodeStart], int]:
        if t0 is not None:
            self.env.clock = int(t0)
        return self.starts(list(texts), prompt_ids, self.env.clock), self.env.clock

    def record(
        self,
        starts: list[EpisodeStart],
        responses: list[str],
        verdicts: list[Verdict],
        t0: int,
        version: int,
        group: int,
        tokens: list[list[int]] | None,
    ) -> None:
        """The judged batch's episode rows, as a run writes them (the rows' `trained`: True)."""
        clocks = self.env.episode_clocks(t0, verdicts)
        ids = tokens if tokens is not None else [[] for _ in starts]
        trajs = []
        for i, (start, response, verdict, t, own) in enumerate(zip(starts, responses, verdicts, clocks, ids)):
            trajs.append(
                Trajectory(
                    prompt_tokens=[],
                    segments=[Segment("action", list(own), [0.0] * len(own))] if own else [],
                    response_text=response,
                    prompt_text=start.prompt_text,
                    prompt_id=start.prompt_id,
                    topic=start.topic,
                    policy_version=version,
                    t=t,
                    target_style=start.target.style,
                    verdict=verdict,
                    arm=self.arm,
                    seed=self.seed,
                    group_id=self.groups + i // max(1, group),
                    candidates=start.target.candidates,
                    generation_target=start.target.style,
                    generation_t=start.t,
                    judge=start.judge or "",
                )
            )
        self.groups += -(-len(starts) // max(1, group))
        self.counts["judge_calls"] += len(verdicts)
        self.counts["judge_failures"] += sum(v.error is not None for v in verdicts)
        self.store.append("episodes", episode_rows(trajs, version, trained=True))

    # -- the policy's side: held-out evaluation, the reference, update rows -----------------------

    def evaluate(self, engine: Any, force: bool = False) -> bool:
        """Held-out evaluation at the clock now, when due (every `eval.every` episodes) or `force`d."""
        if not force and self.clock < self.next_eval:
            return False
        rows, errors, calls = evaluate_heldout(self.env, engine, self.heldout, self.clock)
        self.counts["eval_judge_calls"] += calls
        self.counts["eval_judge_failures"] += len(errors)
        self.store.append("evals", [{"arm": self.arm, "seed": self.seed, **r} for r in rows])
        while self.next_eval <= self.clock:
            self.next_eval += self.scenario.eval.every
        return True

    def reference(self, engine: Any) -> None:
        """The reference per phase (the starting policy told the target, judged by the phase's
        judge; testbed/runtimes/reference_policy.py): call it with the policy before training."""
        samples = self.scenario.eval.reference_samples
        if samples <= 0:
            return
        switches = list(self.schedule.switch_points())
        judges = settled_judges(self.schedule, switches, self.budget)
        rows = reference_rows(self.env, engine, self.heldout, switches, self.budget, samples, self.seed, judges)
        self.store.append("reference", [{"arm": self.arm, "seed": self.seed, **r} for r in rows])

    def judge_used(self) -> dict[str, float]:
        return counter_delta(self.judge_start, judge_counters(self.judge))

    def update(self, metrics: dict[str, Any] | None = None) -> None:
        """One row of `updates` (the trainer's step): the clock, the judge counts, `metrics`."""
        self.updates += 1
        row = {"arm": self.arm, "seed": self.seed, "update": self.updates, "t": self.clock, **self.counts}
        self.store.append("updates", [{**row, "warmup_judge_calls": 0, **(metrics or {}), **self.judge_used()}])

    def close(self, status: str = "done") -> None:
        """Write the totals and the status into the manifest, flush the rows, release the directory."""
        totals = {
            "episodes": self.clock,
            **self.counts,
            "judge": self.judge_used(),
            "updates": self.updates,
            "wall_s": round(time.time() - self.started, 2),
        }
        self.manifest.update(status=status, arms={self.arm: {str(self.seed): totals}})
        self.store.flush()
        self.store.write_manifest(self.manifest)
        self.store.unlock()
        self.env.close()
        closer = getattr(self.judge, "close", None)
        if callable(closer):
            closer()
