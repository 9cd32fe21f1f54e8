"""What the notebooks (analysis/*.py, jupytext-paired) share: the newest run directories, the
folder their figures go to, and showing a figure while saving it."""

from __future__ import annotations

import os
from pathlib import Path

from IPython.display import Image, Markdown, display


def newest_runs(root: Path, n: int = 1) -> list[str]:
    """The `n` most recently written run directories under root/runs (oldest first)."""
    runs = sorted((p for p in (Path(root) / "runs").glob("*/manifest.json")), key=lambda p: p.stat().st_mtime)
    return [str(p.parent) for p in runs[-n:]]


NOTEBOOK_FIGURES = "notebook_figures"  # beside the report's figures/, never inside it
ROOT = Path(__file__).resolve().parents[2]  # the project (analysis/notebooks/helpers.py)


def figure_dir(out_dir: str | Path, notebook: str) -> Path:
    """Where a notebook saves its figures: $TESTBED_NOTEBOOK_OUT, else
    out_dir/notebook_figures/<notebook>/. Never the report's own figures (a run's or comparison's
    `figures/`, which `python -m analysis.report` writes and summary.md links) nor the docs'
    images: a notebook's figures with other settings would silently replace them."""
    chosen = Path(os.environ.get("TESTBED_NOTEBOOK_OUT") or Path(out_dir) / NOTEBOOK_FIGURES / notebook)
    resolved = chosen.resolve()
    report_dir = resolved.parent
    if resolved.name == "figures" and any(
        (report_dir / f).exists() for f in ("manifest.json", "summary.md", "sweep.json")
    ):
        raise ValueError(
            f"{chosen} holds the report's figures; a notebook writes its own beside them "
            f"({report_dir / NOTEBOOK_FIGURES / notebook}): set TESTBED_NOTEBOOK_OUT elsewhere"
        )
    if resolved.is_relative_to(ROOT / "docs"):
        raise ValueError(f"{chosen} is inside docs/, whose images the docs link: set TESTBED_NOTEBOOK_OUT elsewhere")
    return chosen


def save_and_show(fig, name: str, fig_dir: Path) -> Path | None:
    """Save a figure as fig_dir/name.png and show it (nothing to show: say so)."""
    if fig is None:
        display(Markdown(f"_{name}: nothing to draw for this run_"))
        return None
    fig_dir.mkdir(parents=True, exist_ok=True)
    path = fig_dir / f"{name}.png"
    fig.savefig(path)
    display(Image(filename=str(path)))
    return path
