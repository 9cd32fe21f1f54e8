"""The protocols that judges, trainers, schedules and engines implement. They live in the core so
that `judges/` and `trainers/` stand on it and the core never imports them."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from testbed.types import JudgeRequest, Target, Trajectory, Verdict


@runtime_checkable
class Judge(Protocol):
    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]: ...


@runtime_checkable
class DriftSchedule(Protocol):
    def target(self, t: int) -> Target: ...

    def switch_points(self) -> list[int]: ...


@runtime_checkable
class Trainer(Protocol):
    """An algorithm behind one protocol. The loop builds it as
    `cls(policy, args: dict, *, pad_id, temperature, seed)`, validates `args` with `cls.Config`
    (a pydantic model) when the scenario loads, and feeds it judged trajectories in batches of
    `episodes_per_update` episodes, `group_size` samples per prompt (1 for single rollouts; a
    batch is whole groups). `version` counts policy updates.

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
    def generate(self, prompts: list[str], n: int = 1) -> list[Trajectory]: ...

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None: ...

    # Optional, for multi-turn envs: append an observation segment (the env's text) and a newly
    # sampled action segment to each trajectory, in place.
    # def extend(self, trajectories: list[Trajectory], observations: list[str]) -> None: ...
