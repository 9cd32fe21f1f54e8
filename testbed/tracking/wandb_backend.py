"""Weights & Biases: a run per arm x seed (W&B group: the scenario run; job type: the arm) and one
`scenario` run for the resolved scenario, the commit and, at the end, the report's files and
headline figures. Offline by default (RUN/wandb/offline-run-*; `wandb sync` uploads them later);
online mode needs WANDB_API_KEY in the environment, which wandb reads itself: no key is a setting.

Every curve's x-axis is `t` (`define_metric`). A resumed run opens the same run ids again; offline,
that is a new folder with the same id, and `wandb sync` of the folders appends them in order. What
a killed process had handed to wandb's service may never have reached its file, so a resumed run
reads its files (wandb_log.py) to know which points to log again. Run ids follow from the run
directory's path and the arm x seed, so a process killed before it saved them resumes the same runs."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from testbed.tracking.points import Point
from testbed.tracking.run_info import RunInfo, headline, report_files
from testbed.tracking.wandb_log import logged_cursors, run_folders


class WandbBackend:
    name = "wandb"

    def __init__(self, info: RunInfo):
        import wandb

        self.wandb, self.info = wandb, info
        self.runs: dict[str, Any] = {}
        self.held: dict[str, dict[str, tuple[int, int]]] = {}  # a resumed run: what its files hold

    def init(self, run_id: str, name: str, job_type: str, config: dict[str, Any]) -> Any:
        run = self.wandb.init(
            project=self.info.experiment,
            entity=self.info.config.wandb_entity,
            group=self.info.group,
            job_type=job_type,
            name=name,
            id=run_id,
            resume="allow",
            config=config,
            dir=str(self.info.run_dir),
            mode=self.info.config.wandb_mode,
            reinit="create_new",  # a run per arm x seed, open together
            settings=self.wandb.Settings(
                silent=True, console="off", x_disable_stats=True, disable_code=True, x_save_requirements=False
            ),
        )
        run.define_metric("t")
        run.define_metric("*", step_metric="t")
        return run

    def run_id(self, key: str) -> str:
        """The same id for the same run directory and key, whether or not tracking.json kept it."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"{self.info.run_dir.resolve()}#{key}").hex[:12]

    def start(self, saved: dict[str, Any]) -> dict[str, Any]:
        run_id = saved.get("id") or self.run_id("scenario")
        config = {**self.info.scenario, "git_commit": self.info.git_commit}
        self.runs["scenario"] = self.init(run_id, f"{self.info.name}/scenario", "scenario", config)
        return {"id": run_id}

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        run_id = saved.get("id") or self.run_id(key)
        folders = run_folders(self.info.run_dir / "wandb", run_id)
        if folders:  # a resumed run: what reached the files, not what the killed process had queued
            self.held[key] = logged_cursors(folders)
        switches = {f"switch{k}": f"t={t}: {a} -> {b}" for k, (t, a, b) in enumerate(self.info.switches, start=1)}
        config = {"arm": arm, "seed": seed, "git_commit": self.info.git_commit, **switches}
        self.runs[key] = self.init(run_id, f"{self.info.name}/{key}", arm, config)
        return {"id": run_id}

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        if point.key in self.held:
            return point.seq <= self.held[point.key].get(point.stream, (-1, -1))[0]
        return point.seq <= cursor[0]

    def log(self, point: Point) -> None:
        self.runs[point.key].log({"t": point.step, **point.scalars})

    def flush(self) -> None:
        """wandb's own service writes in the background; nothing to push from here."""

    def finish(self, run_dir: Path | None) -> None:
        if run_dir is not None:
            folder = Path(self.runs["scenario"].dir) / "report"  # a run's files/ folder: `wandb sync` uploads it
            folder.mkdir(exist_ok=True)
            for path in report_files(run_dir):
                shutil.copy(path, folder / path.name)
            for key, figures in headline(run_dir).items():
                if key in self.runs:
                    self.runs[key].summary.update({tag: value for tag, (_, value) in figures.items()})
        for run in self.runs.values():
            run.finish(exit_code=0 if run_dir is not None else 1)
