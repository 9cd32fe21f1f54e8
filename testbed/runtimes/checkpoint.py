"""Checkpoints of a run directory, for `--resume RUN_DIR`.

    checkpoints/
      latest.json                      the newest checkpoint first, then the one before it
      <arm>-seed<seed>/u000040.pt      every `reliability.checkpoint_every` updates (last two kept)
      <arm>-seed<seed>/final.pt        at the end of each arm x seed (kept)
      <arm>-seed<seed>/u000040.<tag>.dcp/   a sharded learner's models and optimisers (below)

A checkpoint holds everything the loop needs to continue as if it had never stopped: the trainer
(policy, critic, optimisers, baseline window), the env's clock and prompt sampler, the global RNGs
(the engine samples with torch's), the loop's counters and buffered episodes, the arms already
finished, and the store's snapshot (the durable parts written so far). Resuming rolls the tables
back to that snapshot, so rows written after the checkpoint are written again, once.

Files are written to a temporary name, fsynced and renamed, so a crash leaves the previous
checkpoint intact; a checkpoint that does not load is reported and the one before it is used.

A sharded learner (`learner_strategy: fsdp`) writes its models and optimisers with
torch.distributed.checkpoint into a directory beside the file, every rank its own shards
(testbed/runtimes/sharded_checkpoint.py); the file's trainer state then holds the rest and the
directory's name under `SHARDED`. The directory is complete and renamed before the file that names
it is written, and has a fresh name each time, so a file never names a partial directory.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = 1
KEEP_ROLLING = 2  # rolling checkpoints kept per arm x seed (final ones are always kept)
SHARDED = "sharded_checkpoint"  # in a trainer state: the directory of its sharded models and optimisers


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


def _path(run_dir: Path, arm: str, seed: int, updates: int, final: bool) -> Path:
    return Path(run_dir) / "checkpoints" / f"{arm}-seed{seed}" / ("final.pt" if final else f"u{updates:06d}.pt")


def sharded_dir(run_dir: Path, arm: str, seed: int, updates: int, *, final: bool = False) -> Path:
    """A fresh directory name for the sharded part of the checkpoint `save` will write next."""
    path = _path(run_dir, arm, seed, updates, final)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f"{path.stem}.{uuid.uuid4().hex[:8]}.dcp")


def save(run_dir: Path, arm: str, seed: int, state: dict[str, Any], *, final: bool = False) -> Path:
    """Write one checkpoint and point latest.json at it; prune old rolling ones."""
    path = _path(run_dir, arm, seed, state["loop"]["updates"], final)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, lambda fh: torch.save({"format": FORMAT, **state}, fh))

    pointer = Path(run_dir) / "checkpoints" / "latest.json"
    previous = _read_pointer(pointer)
    chain = [str(path.relative_to(run_dir))] + [p for p in previous if p != str(path.relative_to(run_dir))][:1]
    _atomic_write(pointer, lambda fh: fh.write(json.dumps({"checkpoints": chain}).encode()))

    rolling = sorted(folder.glob("u*.pt"))
    for old in rolling[:-KEEP_ROLLING]:
        if str(old.relative_to(run_dir)) not in chain:
            old.unlink()
    _prune_sharded(folder, path, state.get("trainer", {}).get(SHARDED))
    return path


def _prune_sharded(folder: Path, written: Path, keep: str | None) -> None:
    """Remove sharded directories no checkpoint file names: those of pruned files, those a crash
    left before their file was written, and the one a rewritten file named before."""
    for directory in [*folder.glob("*.dcp"), *folder.glob("*.dcp.tmp")]:
        stem = directory.name.split(".")[0]
        orphan = not (folder / f"{stem}.pt").exists() or directory.name.endswith(".tmp")
        if orphan or (stem == written.stem and directory.name != keep):
            shutil.rmtree(directory, ignore_errors=True)


def _read_pointer(pointer: Path) -> list[str]:
    try:
        return list(json.loads(pointer.read_text())["checkpoints"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def load(path: Path) -> dict[str, Any]:
    state = torch.load(path, weights_only=False, map_location="cpu")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a checkpoint of format {FORMAT}")
    trainer = state.get("trainer")
    if isinstance(trainer, dict) and SHARDED in trainer:  # the learners read it where this file is
        directory = Path(path).parent / Path(trainer[SHARDED]).name
        if not (directory / ".metadata").is_file():
            raise ValueError(f"{path}: its sharded models and optimisers ({directory}) are missing")
        trainer[SHARDED] = str(directory)
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
