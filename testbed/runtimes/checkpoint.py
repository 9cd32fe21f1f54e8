"""Checkpoints of a run directory, for `--resume RUN_DIR`.

    checkpoints/
      latest.json                      the newest checkpoint first, then the one before it
      <arm>-seed<seed>/u000040.pt      every `reliability.checkpoint_every` updates (last two kept)
      <arm>-seed<seed>/final.pt        at the end of each arm x seed (kept)

A checkpoint holds everything the loop needs to continue as if it had never stopped: the trainer
(policy, critic, optimisers, baseline window), the env's clock and prompt sampler, the global RNGs
(the engine samples with torch's), the loop's counters and buffered episodes, the arms already
finished, and the store's snapshot (the durable parts written so far). Resuming rolls the tables
back to that snapshot, so rows written after the checkpoint are written again, once.

Files are written to a temporary name, fsynced and renamed, so a crash leaves the previous
checkpoint intact; a checkpoint that does not load is reported and the one before it is used.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = 1
KEEP_ROLLING = 2  # rolling checkpoints kept per arm x seed (final ones are always kept)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save(run_dir: Path, arm: str, seed: int, state: dict[str, Any], *, final: bool = False) -> Path:
    """Write one checkpoint and point latest.json at it; prune old rolling ones."""
    folder = Path(run_dir) / "checkpoints" / f"{arm}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("final.pt" if final else f"u{state['loop']['updates']:06d}.pt")
    _atomic_write(path, lambda fh: torch.save({"format": FORMAT, **state}, fh))

    pointer = Path(run_dir) / "checkpoints" / "latest.json"
    previous = _read_pointer(pointer)
    chain = [str(path.relative_to(run_dir))] + [p for p in previous if p != str(path.relative_to(run_dir))][:1]
    _atomic_write(pointer, lambda fh: fh.write(json.dumps({"checkpoints": chain}).encode()))

    rolling = sorted(folder.glob("u*.pt"))
    for old in rolling[:-KEEP_ROLLING]:
        if str(old.relative_to(run_dir)) not in chain:
            old.unlink()
    return path


def _read_pointer(pointer: Path) -> list[str]:
    try:
        return list(json.loads(pointer.read_text())["checkpoints"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def load(path: Path) -> dict[str, Any]:
    state = torch.load(path, weights_only=False, map_location="cpu")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a checkpoint of format {FORMAT}")
    return state


def load_latest(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads (falling back to the one before it), or None if the run
    never wrote one."""
    run_dir = Path(run_dir)
    chain = _read_pointer(run_dir / "checkpoints" / "latest.json")
    if not chain:  # the pointer itself was lost: take the newest file on disk
        files = sorted((run_dir / "checkpoints").glob("*/*.pt"), key=lambda p: p.stat().st_mtime, reverse=True)
        chain = [str(p.relative_to(run_dir)) for p in files[:2]]
    for relative in chain:
        path = run_dir / relative
        try:
            return path, load(path)
        except Exception as exc:  # a torn or foreign file: say so and try the previous one
            warnings.warn(f"checkpoint {path} does not load ({exc}); trying the one before it", stacklevel=2)
    return None
