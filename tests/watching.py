"""Watching a run directory from outside while the run writes, prunes and discards files in it."""

from collections.abc import Iterable
from pathlib import Path


def newest_mtime(paths: Iterable[Path]) -> float:
    """The newest modification time among `paths`, 0.0 for none. A file that vanishes between the
    listing and its stat (a pruned checkpoint, a part a resume discards) is skipped, not an error."""
    times = []
    for path in paths:
        try:
            times.append(path.stat().st_mtime)
        except FileNotFoundError:
            continue
    return max(times, default=0.0)
