"""`Analysis`: what `analysis.report.analyse` computes from one or more runs, the tables that
analysis/tables/summary.py, analysis/tables/console.py and analysis/tables/verdicts.py write out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis.metrics import nonstationary
from analysis.run_data import RunData


@dataclass
class Analysis:
    runs: list[RunData]
    per_seed: pd.DataFrame  # switch metrics per run, arm, seed and switch
    switches: pd.DataFrame  # aggregated per run, arm and switch
    arms: pd.DataFrame  # per run and arm
    summary: pd.DataFrame  # arms joined with switches: summary.csv
    windows: dict[str, int]
    fraction: float
    horizon: int | None
    labelled: bool  # arms are labelled "run:arm" (several runs)
    offpolicy: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run and arm: staleness, DIS, clip
    turns: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run and arm of a multi-turn run
    segments: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run, arm, seed and segment
    intervals: pd.DataFrame = field(default_factory=pd.DataFrame)  # rliable: per arm, metric and task
    improvement: pd.DataFrame = field(default_factory=pd.DataFrame)  # rliable: per ordered pair of arms
    old_level: float = nonstationary.DEFAULT_OLD_LEVEL
    goodhart: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run, arm and phase: training vs gold reward
    paired: pd.DataFrame = field(
        default_factory=pd.DataFrame
    )  # analysis/stats/paired.py: per pair of arms, metric, task
    arm_order: list[str] = field(default_factory=list)  # the scenario's order (labelled 'run:arm' for several runs)

    @property
    def asynchronous(self) -> bool:
        """Any episode trained off-policy, or dropped as too stale: worth a table."""
        o = self.offpolicy
        return not o.empty and bool((o["staleness_mean"].fillna(0) > 0).any() or (o["dropped"] > 0).any())
