"""A run directory read once: its manifest and tables (`load_run`), as `analysis.report` and
`analysis.sweep_report` use them. Tables a run did not write are empty DataFrames (an older run
has no `reference` table: the report then falls back to the best plateau and the best arm)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.metrics import realign
from testbed.store import read_table


@dataclass
class RunData:
    """A run directory's manifest and tables."""

    path: Path
    manifest: dict[str, Any]
    episodes: pd.DataFrame
    updates: pd.DataFrame
    evals: pd.DataFrame
    dropped: pd.DataFrame = field(default_factory=pd.DataFrame)  # too stale to train on (runtime.max_staleness)
    reference: pd.DataFrame = field(default_factory=pd.DataFrame)  # the reference policy per arm, seed, phase
    name: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def switch_points(self) -> list[int]:
        return [int(s) for s in self.manifest.get("switch_points") or []]

    @property
    def switches(self) -> list[int] | dict[tuple[str, int], list[int]]:
        """The switch points `realign.switch_metrics` takes: per (arm, seed) where the arms' totals
        record their own (a schedule in simulated seconds), else the run's list."""
        own = {
            (str(arm), int(seed)): [int(s) for s in totals["switch_points"]]
            for arm, seeds in (self.manifest.get("arms") or {}).items()
            for seed, totals in seeds.items()
            if isinstance(totals, dict) and "switch_points" in totals
        }
        return own or self.switch_points

    @property
    def budget(self) -> int:
        budget = self.manifest.get("budget")
        if budget is None:
            budget = int(self.episodes["t"].max()) + 1 if not self.episodes.empty else 0
        return int(budget)

    @property
    def seeds(self) -> list[int]:
        seeds = self.manifest.get("seeds")
        if seeds is None and not self.episodes.empty:
            seeds = sorted(self.episodes["seed"].unique())
        return [int(s) for s in seeds or []]

    def arm_order(self) -> list[str]:
        """The arms in the scenario's order (scenario.yaml beside the tables, else the manifest's
        completed arms, else the episodes'); arms found only in the tables follow, sorted."""
        names: list[str] = []
        scenario = self.path / "scenario.yaml"
        if scenario.is_file():
            try:
                import yaml

                names = [
                    str(a["name"])
                    for a in (yaml.safe_load(scenario.read_text()) or {}).get("arms") or []
                    if isinstance(a, dict) and "name" in a
                ]
            except Exception:  # an unreadable scenario file: fall back to the manifest
                names = []
        names = names or [str(a) for a in (self.manifest.get("arms") or {})]
        present = [str(a) for a in dict.fromkeys(self.episodes["arm"])] if "arm" in self.episodes else []
        return [a for a in names if a in present] + sorted(a for a in present if a not in names)

    def schedule_key(self) -> tuple:
        targets = realign.phase_targets(self.episodes, self.evals, self.switch_points, self.budget)
        return tuple(self.switch_points), self.budget, tuple(targets)


class RunDataError(ValueError):
    """A run directory whose files cannot be read as a run's (the message names the file)."""


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory (manifest and the three tables, each possibly empty)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"not a run directory: {path}")
    manifest_path = path / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    except ValueError as exc:  # cut short or damaged: name the file, never a bare JSON position
        raise RunDataError(
            f"{manifest_path} is damaged ({exc}); the report reads the run's switch points and budget from it: "
            f"put back a good copy, or have it rebuilt: python -m testbed.run --resume {path} says how"
        ) from None
    tables = {name: read_table(path, name) for name in ("episodes", "updates", "evals")}
    run = RunData(
        path=path,
        manifest=manifest,
        name=path.name,
        dropped=read_table(path, "dropped"),
        reference=read_table(path, "reference"),
        **tables,
    )
    if not manifest_path.exists():
        run.notes.append("no manifest.json")
    status = manifest.get("status")
    if status and status != "done":
        run.notes.append(f"status: {status}")
    for name, df in tables.items():
        if df.empty:
            run.notes.append(f"no {name}")
    for arm, seeds in (manifest.get("arms") or {}).items():
        for seed, totals in seeds.items():
            outages = totals.get("judge_outages") or []
            if outages:  # failed judge calls are gaps (excluded), not zero rewards: say where they were
                at = ", ".join(f"t={o['t']} ({o['failed_calls']} calls)" for o in outages[:3])
                run.notes.append(f"judge outages in {arm} seed {seed}: {at}{' ...' if len(outages) > 3 else ''}")
    if not tables["episodes"].empty and run.reference.empty and run.switch_points:
        run.notes.append("no reference table: the bar is the best pre-switch plateau, regret is against the best arm")
    if manifest.get("resumes"):
        run.notes.append(f"resumed {len(manifest['resumes'])}x from checkpoints")
    return run
