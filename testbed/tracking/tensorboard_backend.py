"""TensorBoard: event files under RUN/tb/, one folder per arm x seed (so each is a run in the UI) and
`scenario/` for the resolved scenario, the commit and, at the end, the report (text and figures).

The events are written with tensorboard's own EventFileWriter and protos, not torch's SummaryWriter:
importing torch would cost the writer process seconds of CPU for nothing, and a point's scalars go
into one event (one record) instead of one each.

`--resume` opens each folder again with a purge step (the SessionLog START event SummaryWriter's
`purge_step` writes): TensorBoard drops the events at or after it from the earlier files, so a point
logged before the kill but after the last saved cursor is not shown twice; the writer then logs
every point from that step on again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from testbed.tracking.points import STREAMS, Point
from testbed.tracking.run_info import RunInfo, headline, report_files


class EventWriter:
    """One folder's event file: scalars, texts and PNG images as TensorBoard's plugins read them."""

    def __init__(self, folder: Path, purge_step: int | None = None):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.event_pb2, self.summary_pb2 = event_pb2, summary_pb2
        self.file = EventFileWriter(str(folder), max_queue_size=1000, flush_secs=3600)
        if purge_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self.file.add_event(event_pb2.Event(wall_time=time.time(), step=purge_step, session_log=start))

    def add(self, step: int, values: list[Any]) -> None:
        summary = self.summary_pb2.Summary(value=values)
        self.file.add_event(self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.add(step, [self.summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in scalars.items()])

    def text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2
        from tensorboard.plugins.text import plugin_data_pb2

        content = plugin_data_pb2.TextPluginData(version=0).SerializeToString()
        meta = self.summary_pb2.SummaryMetadata(
            plugin_data=self.summary_pb2.SummaryMetadata.PluginData(plugin_name="text", content=content)
        )
        shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)])
        tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[text.encode()], tensor_shape=shape)
        self.add(step, [self.summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])

    def png(self, tag: str, path: Path, step: int) -> None:
        from PIL import Image

        with Image.open(path) as image:
            width, height = image.size
        encoded = self.summary_pb2.Summary.Image(
            height=height, width=width, colorspace=4, encoded_image_string=path.read_bytes()
        )
        self.add(step, [self.summary_pb2.Summary.Value(tag=tag, image=encoded)])


class TensorBoardBackend:
    name = "tensorboard"

    def __init__(self, info: RunInfo):
        self.info = info
        self.root = info.run_dir / "tb"
        self.writers: dict[str, EventWriter] = {}
        self.purge: dict[str, int] = {}  # key -> the first step logged again after a resume

    def start(self, saved: dict[str, Any]) -> dict[str, Any]:
        writer = self.writers["scenario"] = EventWriter(self.root / "scenario")
        if not saved:
            writer.text("scenario", f"```yaml\n{self.info.scenario_yaml}\n```", 0)
            writer.text("git_commit", str(self.info.git_commit), 0)
        return {"logdir": "tb"}

    def open(self, key: str, arm: str, seed: int, saved: dict[str, Any], cursors: dict[str, Any]) -> dict[str, Any]:
        purge = None
        if (self.root / key).exists():  # resumed: every stream again from the earliest of their last steps
            purge = self.purge[key] = max(min(cursors.get(s, (-1, 0))[1] for s in STREAMS), 0)
        self.writers[key] = EventWriter(self.root / key, purge)
        return {"folder": key}

    def skip(self, point: Point, cursor: tuple[int, int]) -> bool:
        if point.key in self.purge:
            return point.step < self.purge[point.key]
        return point.seq <= cursor[0]

    def log(self, point: Point) -> None:
        writer = self.writers[point.key]
        writer.scalars(point.step, point.scalars)
        for tag, text in point.texts.items():
            writer.text(tag, text, point.step)

    def flush(self) -> None:
        for writer in self.writers.values():
            writer.file.flush()

    def finish(self, run_dir: Path | None) -> None:
        if run_dir is not None:
            self.report(run_dir)
        for writer in self.writers.values():
            writer.file.close()
        self.writers = {}  # closed: the writer's last flush has nothing left to flush

    def report(self, run_dir: Path) -> None:
        scenario = self.writers["scenario"]
        for path in report_files(run_dir):
            if path.suffix == ".md":
                scenario.text("summary.md", path.read_text(), 0)
            else:
                scenario.png(f"figures/{path.stem}", path, 0)
        for key, figures in headline(run_dir).items():
            if key in self.writers:
                for tag, (step, value) in figures.items():
                    self.writers[key].scalars(step, {tag: value})
