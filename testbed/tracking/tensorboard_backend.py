"""TensorBoard: event files under RUN/tb/, one folder per arm x seed (so each is a run in the UI) and
`scenario/` for the resolved scenario, the commit and, at the end, the report (text and figures).

`--resume` opens each folder again with `purge_step`: TensorBoard drops the events at or after it
from the earlier files, so a point logged before the kill but after the last saved cursor is not
shown twice; the writer then logs every point from that step on again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.tracking.points import STREAMS, Point
from testbed.tracking.run_info import RunInfo, headline, report_files


class TensorBoardBackend:
    name = "tensorboard"

    def __init__(self, info: RunInfo):
        from torch.utils.tensorboard import SummaryWriter  # the extra's tensorboard, through torch

        self.info, self.make = info, SummaryWriter
        self.root = info.run_dir / "tb"
        self.writers: dict[str, Any] = {}
        self.purge: dict[str, int] = {}  # key -> the first step logged again after a resume

    def start(self, saved: dict[str, Any]) -> dict[str, Any]:
        writer = self.writers["scenario"] = self.make(str(self.root / "scenario"), flush_secs=3600)
        if not saved:
            writer.add_text("scenario", f"```yaml\n{self.info.scenario_yaml}\n```", 0)
            writer.add_text("git_commit", str(self.info.git_commit), 0)
        return {"logdir": "tb"}

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        purge = None
        if (self.root / key).exists():  # resumed: every stream again from the earliest of their last steps
            purge = self.purge[key] = max(min(cursors.get(s, (-1, 0))[1] for s in STREAMS), 0)
        self.writers[key] = self.make(str(self.root / key), purge_step=purge, flush_secs=3600)
        return {"folder": key}

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        if point.key in self.purge:
            return point.step < self.purge[point.key]
        return point.seq <= cursor[0]

    def log(self, point: Point) -> None:
        writer = self.writers[point.key]
        for tag, value in point.scalars.items():
            writer.add_scalar(tag, value, point.step)
        for tag, text in point.texts.items():
            writer.add_text(tag, text, point.step)

    def flush(self) -> None:
        for writer in self.writers.values():
            writer.flush()

    def finish(self, run_dir: Path | None) -> None:
        if run_dir is not None:
            self.report(run_dir)
        for writer in self.writers.values():
            writer.close()

    def report(self, run_dir: Path) -> None:
        from PIL import Image

        scenario = self.writers["scenario"]
        for path in report_files(run_dir):
            if path.suffix == ".md":
                scenario.add_text("summary.md", path.read_text(), 0)
            else:
                image = np.asarray(Image.open(path).convert("RGB"))
                scenario.add_image(f"figures/{path.stem}", image, 0, dataformats="HWC")
        for key, figures in headline(run_dir).items():
            if key in self.writers:
                for tag, (step, value) in figures.items():
                    self.writers[key].add_scalar(tag, value, step)
