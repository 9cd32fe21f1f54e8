"""What every backend is told about the run, and what the report leaves for the trackers at the end."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.tracking.config import TrackingConfig
from testbed.tracking.points import number, run_key

MAX_PARAM = 500  # MLflow's limit on a parameter's value
# A key with one of these words holds a secret: its value is never sent to a tracker (as the dry-run's plan)
SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
# The report's headline figures per switch (docs/architecture.md, "Realignment metrics")
HEADLINE = ("episodes_to_bar", "reached_bar", "judge_calls_to_bar", "auc_after", "plateau", "dip", "new_share_end")


@dataclass(frozen=True)
class RunInfo:
    run_dir: Path
    name: str  # the run directory's name
    experiment: str  # MLflow experiment, W&B project
    group: str  # the W&B group (a sweep: its name)
    scenario: dict[str, Any]  # resolved, defaults filled in
    scenario_yaml: str
    git_commit: str | None
    config: TrackingConfig
    switches: list[tuple[int, str, str]] = field(default_factory=list)

    def params(self) -> dict[str, str]:
        """The resolved scenario flattened to dotted keys (`arms.0.args.policy_lr`), plus the commit."""
        flat: dict[str, str] = {"git_commit": str(self.git_commit)}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict) and value:
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                for i, v in enumerate(value):
                    walk(f"{prefix}.{i}", v)
            else:
                flat[prefix] = str(value)[:MAX_PARAM]

        walk("", self.scenario)
        return flat


def public(value: Any, key: str = "") -> Any:
    """The scenario as trackers may see it: a secret-named key's value hidden, a URL's password too."""
    if isinstance(value, dict):
        return {k: public(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [public(v, key) for v in value]
    if SECRET_WORDS & set(key.lower().split("_")) and not key.endswith("_env"):
        return "<hidden>"
    if isinstance(value, str):
        return re.sub(r"(://[^/@:\s]+):[^/@\s]*@", r"\1:<hidden>@", value)
    return value


def report_files(run_dir: Path) -> list[Path]:
    """The report's `summary.md` and figures, where the report wrote them."""
    files = [run_dir / "summary.md", *sorted((run_dir / "figures").glob("*.png"))]
    return [f for f in files if f.is_file()]


def headline(run_dir: Path) -> dict[str, dict[str, tuple[int, float]]]:
    """Per arm x seed, the report's figures per switch (`switches_by_seed.csv`): name -> (switch clock,
    value), e.g. `report/switch1/episodes_to_bar`."""
    path = run_dir / "switches_by_seed.csv"
    if not path.is_file():
        return {}
    table = pd.read_csv(path)
    out: dict[str, dict[str, tuple[int, float]]] = {}
    numeric = [c for c in HEADLINE if c in table.columns]
    for row in table.to_dict("records"):
        figures = out.setdefault(run_key(row["arm"], row["seed"]), {})
        for column in numeric:
            value = number(row[column])
            if value is not None:
                figures[f"report/switch{int(row['switch'])}/{column}"] = (int(row["t"]), value)
    return out
