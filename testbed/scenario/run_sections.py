"""The scenario's run sections: the episode budget, held-out evaluation, where and how often rows
are written (`output`), and what a run tolerates before it stops (`reliability`)."""

from __future__ import annotations

from pydantic import Field

from testbed.scenario.plugins import Strict

__all__ = ["BudgetConfig", "EvalConfig", "OutputConfig", "ReliabilityConfig"]


class BudgetConfig(Strict):
    episodes: int = Field(gt=0, description="judged training episodes per arm x seed")


class EvalConfig(Strict):
    every: int = Field(default=200, gt=0, description="episodes between held-out evaluations")
    prompts: int = Field(default=64, gt=0, description="held-out prompts per evaluation")
    reference_samples: int = Field(
        default=4,
        ge=0,
        description="samples per held-out prompt and phase of the starting policy "
        "told the target: the arms' common reference (testbed/runtimes/reference_policy.py); 0 = none",
    )


class OutputConfig(Strict):
    dir: str = "runs"
    flush_rows: int = Field(default=512, gt=0, description="buffered rows per table before a durable flush")
    flush_seconds: float = Field(default=30.0, gt=0, description="...or this long since the last flush")


class ReliabilityConfig(Strict):
    checkpoint_every: int = Field(
        default=20,
        gt=0,
        description="policy updates between checkpoints (also one at the start and end of each arm x seed)",
    )
    judge_failure_budget: int = Field(
        default=512, gt=0, description="failed judge calls in a row before the run stops with a resumable checkpoint"
    )
    max_nonfinite_updates: int = Field(
        default=5, gt=0, description="updates in a row skipped for a NaN/inf loss or gradient before the run stops"
    )
