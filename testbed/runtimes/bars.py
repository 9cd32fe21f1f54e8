"""The run's one progress display: a bar per seed for each SFT policy trained, each trainer
warm-up (SAO: the judged samples, then the critic's value pretraining) and each arm's RL.

The training loops know nothing of it: they call `on_step(step, total, **values)` with values
they have computed anyway (`testbed.models.sft.train_sft`, `judged_samples`, a trainer's
`warmup`), and a `StepBar` draws those calls as one bar of a `rich.progress.Progress`, or of a
Ray task's `RemoteProgress` (testbed/runtimes/ray/parallel.py), which the driver draws into its own.
"""

from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text


class CountColumn(ProgressColumn):
    """`t 120/600` for an arm (its episodes), `step 40/192` for SFT or a warm-up."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.fields.get('unit', 't')} {task.completed:>5.0f}/{task.total:.0f}")


class StatusColumn(ProgressColumn):
    """An arm's target and rolling reward; SFT's or a warm-up's values (its `status`)."""

    def render(self, task: Task) -> Text:
        fields = task.fields
        if "status" in fields:
            return Text(fields["status"])
        return Text.from_markup(f"target [cyan]{fields['target']:<10}[/] reward {fields['reward']}")


def make_progress() -> Progress:
    """The display, gone when it stops (`transient`): each bar's end is a log line of its own (SFT
    done, an arm finished) and the run's ending says the rest, so the finished bars would only
    repeat them; where the console is not a terminal (a log file, CI), they would print as a block
    of wrapped columns before the ending."""
    return Progress(
        TextColumn("[bold]{task.fields[arm]}[/] seed {task.fields[seed]}"),
        BarColumn(),
        CountColumn(),
        StatusColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=True,
    )


def status(values: dict[str, Any]) -> str:
    """`value loss 0.0312  explained variance 0.42`: floats to three significant digits (a critic's
    explained variance on near-constant returns can be -5e+13), the rest as they are."""
    return "  ".join(
        f"{name.replace('_', ' ')} {value:.3g}" if isinstance(value, float) else f"{name.replace('_', ' ')} {value}"
        for name, value in values.items()
    )


class StepBar:
    """A loop's `on_step(step, total, **values)` as one bar of `progress` (a rich Progress or a
    RemoteProgress), labelled `name` seed `seed`; the bar appears at the first step, so a cached
    result (no steps) shows none."""

    def __init__(self, progress: Any, name: str, seed: Any, unit: str = "step"):
        self.progress, self.name, self.seed, self.unit = progress, name, seed, unit
        self.task: Any = None

    def __call__(self, step: int, total: int, **values: Any) -> None:
        if self.task is None:
            self.task = self.progress.add_task(
                "", total=total, completed=step, arm=self.name, seed=self.seed, unit=self.unit, status=status(values)
            )
        else:
            self.progress.update(self.task, total=total, completed=step, status=status(values))
