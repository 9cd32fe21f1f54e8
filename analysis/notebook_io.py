"""What the notebooks (analysis/*.py, jupytext-paired) share: the newest run directories and
showing a figure while saving it."""

from __future__ import annotations

from pathlib import Path

from IPython.display import Image, Markdown, display


def newest_runs(root: Path, n: int = 1) -> list[str]:
    """The `n` most recently written run directories under root/runs (oldest first)."""
    runs = sorted((p for p in (Path(root) / "runs").glob("*/manifest.json")), key=lambda p: p.stat().st_mtime)
    return [str(p.parent) for p in runs[-n:]]


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
