"""A custom drift schedule, plugged in by import path: a target that leaves and comes back.

    A -> B -> A : does the policy relearn a style it was once good at faster than the first time?

Scenario snippet (with this directory, or your own package, on PYTHONPATH)::

    schedule:
      type: "custom_schedule:ReturningSchedule"     # for your package: "mypkg.drift:MySchedule"
      args:
        styles: [cute, classical, cute]
        switch_at: [0.25, 0.5]                       # fractions of the episode budget
        candidates: [academic, classical, cute]

`args` are checked by the class's own `Config` (a pydantic model) when the scenario loads, so a
misspelt or badly typed key is named before anything trains. The class is then built as
`ReturningSchedule(budget=..., archetypes=..., **args)` (docs/plugins.md): like every schedule it
takes positions as FRACTIONS of the episode budget and turns them into clocks (judged training
episodes, the env's `t`) with the budget it is given.

What a schedule must do (the run checks it at start-up, before any training):
  * `target(t) -> testbed.types.Target(style, candidates)` for every clock t >= 0, a pure
    function of t; the style must be in the world and in its own candidates;
  * `switch_points() -> list[int]`: exactly the clocks where `target(t).style` changes.

Run this file to print the targets around the switches:

    python examples/custom_schedule.py
"""

from __future__ import annotations

import bisect

from pydantic import BaseModel, ConfigDict, Field, model_validator

from testbed.types import Target


class ReturningSchedule:
    """`styles[i]` is the target from `switch_at[i-1]` (0 for the first) up to `switch_at[i]`;
    the last style holds to the end. The prompt lists `candidates` (default: the styles, in
    order of first appearance) throughout."""

    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")

        styles: list[str] = Field(min_length=2, description="the target styles, in order")
        switch_at: list[float] = Field(description="fractions of the budget at which the next style takes over")
        candidates: list[str] | None = Field(None, description="styles the prompt lists (default: styles)")

        @model_validator(mode="after")
        def _consistent(self) -> ReturningSchedule.Config:
            if len(self.switch_at) != len(self.styles) - 1:
                raise ValueError(
                    f"switch_at needs {len(self.styles) - 1} positions for {len(self.styles)} "
                    f"styles, got {len(self.switch_at)}"
                )
            if any(a >= b for a, b in zip([0, *self.switch_at], [*self.switch_at, 1])):
                raise ValueError(f"switch_at must be increasing fractions between 0 and 1, got {self.switch_at}")
            if any(a == b for a, b in zip(self.styles, self.styles[1:])):
                raise ValueError(f"styles repeats a style back to back, so a switch changes nothing: {self.styles}")
            missing = sorted(set(self.styles) - set(self.candidates or self.styles))
            if missing:
                raise ValueError(f"candidates {self.candidates} lack the target styles {missing}")
            return self

    def __init__(
        self,
        styles: list[str],
        switch_at: list[float],
        candidates: list[str] | None = None,
        *,
        budget: int,
        archetypes: tuple[str, ...] = (),
    ) -> None:
        self.styles = list(styles)
        self.switch_at = [round(s * budget) for s in switch_at]  # fractions of the budget -> clocks
        self.candidates = tuple(candidates or dict.fromkeys(styles))

    def target(self, t: int) -> Target:
        return Target(style=self.styles[bisect.bisect_right(self.switch_at, t)], candidates=self.candidates)

    def switch_points(self) -> list[int]:
        return list(self.switch_at)  # the Config forbids a "switch" to the same style


if __name__ == "__main__":
    config = ReturningSchedule.Config(styles=["cute", "classical", "cute"], switch_at=[1 / 3, 2 / 3])
    schedule = ReturningSchedule(**config.model_dump(), budget=2400)
    for t in (0, 799, 800, 1599, 1600, 5000):
        print(f"t={t:>5}: {schedule.target(t)}")
    print("switch points:", schedule.switch_points())
