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
    group_size: int

    def update(self, batch: list[Trajectory]) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Engine(Protocol):
    def generate(self, prompts: list[str], n: int = 1) -> list[Trajectory]: ...

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None: ...
