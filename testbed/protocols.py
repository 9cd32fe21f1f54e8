"""The protocols that judges, trainers, schedules, engines and envs implement: what each kind of
plugin must provide (nothing needs subclassing). They live in the core so that `judges/` and
`trainers/` stand on it and the core never imports them. How each is built: testbed/registry.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from testbed.types import JudgeRequest, Target, Trajectory, Verdict


@runtime_checkable
class Judge(Protocol):
    """Built as `factory(**args)`, or named ready-made; testbed/judging/adapter.py also turns a sync
    `judge(requests)`, a `score(request)` or a function of one request into this protocol."""

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]: ...


# The name a drift schedule gives the scenario's own `judge` (its other judges are the keys of `judges:`).
DEFAULT_JUDGE = "default"


@runtime_checkable
class DriftSchedule(Protocol):
    """Built as `factory(*, budget, archetypes, **args)` (the run's episode budget, to turn
    fractions of it into clocks, and the world's default candidate styles), or named ready-made.

    Optional, for a schedule that changes the judge as well as the target (a template upgrade, a
    rising bar, a blend of two judges; testbed/envs/schedules/judge_drift.py):
    `judge_at(t) -> str`, the name of the judge whose verdict counts at clock t: DEFAULT_JUDGE
    (the scenario's `judge`) or a key of the scenario's `judges:`. Pure in t, as `target(t)` is;
    `switch_points()` then lists the clocks where the judge changes too (for a blend, the middle of
    its `windows()`). A schedule without it keeps the scenario's judge throughout."""

    def target(self, t: int) -> Target: ...

    def switch_points(self) -> list[int]: ...


@runtime_checkable
class Trainer(Protocol):
    """An algorithm behind one protocol. The loop builds it as
    `factory(policy, *, pad_id, temperature, seed, **args)`, checks `args` with its `Config` (a
    pydantic model; else against its signature) when the scenario loads, and feeds it judged
    trajectories in batches of `episodes_per_update` episodes, `group_size` samples per prompt
    (1 for single rollouts; a batch is whole groups). `version` counts policy updates.

    `update()` returns float metrics plus two keys always present: "nonfinite", the first
    non-finite quantity of the update ("policy loss", "policy grad norm", "critic loss",
    "critic grad norm") or None, and "skipped_steps", the optimiser steps the update skipped for
    it (int). A skipped policy step leaves the parameters, optimiser state and `version` as they were.

    Optional warm-up hooks (the loop never names an algorithm): a trainer with
    `warmup_samples > 0` also has `warmup(trajectories) -> report`, `warmup_key()` (what the
    result depends on), `warmup_state()` and `load_warmup_state()`; the loop then samples and
    judges that many episodes from the fixed SFT policy before RL and caches the result. A
    `warmup` that takes `on_step` is called with it: `on_step(step, total, **values)` after each
    of its steps draws a progress bar (values it has on the host anyway, e.g. `value_loss`).
    """

    episodes_per_update: int  # its `Config` may have it too: the budget check reads it when the scenario loads
    group_size: int
    version: int

    def update(self, batch: list[Trajectory]) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """Built as `factory(policy, tokenizer, sampling, **args)`."""

    def generate(self, prompts: list[str], n: int = 1) -> list[Trajectory]: ...

    # Optional, for `sampling.streams: episode` (common random numbers across arms): a generate
    # that also takes `streams` (one per prompt; testbed.envs.episode.stream_id) and draws each
    # response's randomness from its stream alone (testbed/engines/streams.py). The episode runners
    # pass it where the signature has it.
    # def generate(self, prompts: list[str], n: int = 1, streams: list[int] | None = None) -> ...

    # None: the engine shares the trainer's module (the synchronous loop); only the version moves.
    def load_weights(self, state_dict: dict[str, Any] | None, version: int) -> None: ...

    # Optional, for multi-turn envs: append an observation segment (the env's text) and a newly
    # sampled action segment to each trajectory, in place.
    # def extend(self, trajectories: list[Trajectory], observations: list[str]) -> None: ...


@runtime_checkable
class Env(Protocol):
    """What the loop calls on an environment (testbed/runtimes: loop.py, collect.py,
    reference_policy.py; the Ray runtime also `episode_runner()`). It is built as
    `factory(judge, schedule, prompt_specs, *, seed, **args)` (plus `candidate_change_share=` when
    world.candidate_change_share < 1); `StyleShiftEnv` implements all of it, and an env may
    subclass or wrap it, or be written from scratch.

    `clock` counts judged training episodes (the loop sets it on start and resume); `np_random`
    is a numpy Generator whose `bit_generator.state` the checkpoints save and restore. The
    "starts" are whatever `reset_batch`/`eval_starts`/`told_target_starts` return and the other
    methods take back (StyleShiftEnv's `EpisodeStart`: prompt_text, target_style, topic, ...;
    the episode rows read those fields)."""

    clock: int
    np_random: Any

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]: ...

    def reset_batch(self, n: int, repeat: int = 1) -> list[Any]: ...

    def retarget(self, start: Any, t: int) -> Any: ...

    def rollout(self, engine: Engine, starts: Sequence[Any]) -> list[Trajectory]: ...

    def episode_runner(self) -> Callable[..., list[Trajectory]]: ...

    def step_batch(self, starts: Sequence[Any], responses: Sequence[str]) -> list[Verdict]: ...

    def episode_clocks(self, t0: int, verdicts: Sequence[Verdict]) -> list[int]: ...

    def score_with(self, judge: Judge, starts: Sequence[Any], responses: Sequence[str]) -> list[Verdict]: ...

    def eval_starts(self, specs: Sequence[Any], t: int, first: int = 0) -> list[Any]: ...

    def told_target_starts(self, specs: Sequence[Any], t: int) -> list[Any]: ...

    def evaluate_batch(self, starts: Sequence[Any], responses: Sequence[str]) -> list[Verdict]: ...

    def close(self) -> None: ...


def missing_methods(obj: Any, protocol: type) -> list[str]:
    """The attributes and methods of `protocol` that `obj` lacks (for an error that names them)."""
    names = set(getattr(protocol, "__annotations__", {})) | {
        k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")
    }
    return sorted(n for n in names if not hasattr(obj, n))
