"""Checkpoint files: atomic, pruned, and a torn newest one falls back to the one before it."""

import random

import numpy as np
import pytest
import torch

from testbed.runtimes import checkpoint


def state(updates: int) -> dict:
    return {
        "arm": "rm",
        "seed": 0,
        "done": False,
        "loop": {"updates": updates},
        "weights": torch.full((3,), float(updates)),
    }


def test_latest_wins_and_old_rolling_checkpoints_are_pruned(tmp_path):
    for u in (0, 2, 4, 6):
        checkpoint.save(tmp_path, "rm", 0, state(u))
    checkpoint.save(tmp_path, "rm", 0, {**state(8), "done": True}, final=True)
    files = sorted(p.name for p in (tmp_path / "checkpoints" / "rm-seed0").iterdir())
    assert files == ["final.pt", "u000004.pt", "u000006.pt"]
    path, loaded = checkpoint.load_latest(tmp_path)
    assert path.name == "final.pt" and loaded["loop"]["updates"] == 8 and loaded["done"]


def test_a_torn_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    checkpoint.save(tmp_path, "rm", 0, state(2))
    newest = checkpoint.save(tmp_path, "rm", 0, state(4))
    newest.write_bytes(newest.read_bytes()[:100])
    with pytest.warns(UserWarning, match="does not load"):
        path, loaded = checkpoint.load_latest(tmp_path)
    assert path.name == "u000002.pt" and torch.equal(loaded["weights"], torch.full((3,), 2.0))


def test_no_checkpoint_is_none(tmp_path):
    assert checkpoint.load_latest(tmp_path) is None


def test_rng_states_round_trip():
    saved = checkpoint.rng_state()
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    checkpoint.set_rng_state(saved)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == first


def sharded_state(run_dir, updates: int, *, final: bool = False, lose_metadata: bool = False) -> dict:
    """A checkpoint whose trainer's models went to a sharded directory: what the file and the
    directory hold of it (DCP's own writing and resharding are tests/test_fsdp.py's)."""
    directory = checkpoint.sharded_dir(run_dir, "rm", 0, updates, final=final)
    directory.mkdir()
    (directory / "__0_0.distcp").write_bytes(b"shards")
    if not lose_metadata:
        (directory / ".metadata").write_bytes(b"index")
    return {**state(updates), "trainer": {"version": updates, checkpoint.SHARDED: directory.name}}


def test_sharded_directories_follow_their_files_and_a_missing_one_falls_back(tmp_path):
    folder = tmp_path / "checkpoints" / "rm-seed0"
    for u in (2, 4):
        checkpoint.save(tmp_path, "rm", 0, sharded_state(tmp_path, u))
    crashed = checkpoint.sharded_dir(tmp_path, "rm", 0, 6)  # a crash after the shards, before the file
    crashed.with_name(crashed.name + ".tmp").mkdir()
    crashed.mkdir()
    checkpoint.save(tmp_path, "rm", 0, sharded_state(tmp_path, 8))
    again = sharded_state(tmp_path, 8)  # the same update written again (after a resume): the old one goes
    checkpoint.save(tmp_path, "rm", 0, again)
    names = sorted(p.name.split(".")[0] + p.suffix for p in folder.iterdir())
    assert names == ["u000004.dcp", "u000004.pt", "u000008.dcp", "u000008.pt"]
    path, loaded = checkpoint.load_latest(tmp_path)
    assert loaded["trainer"][checkpoint.SHARDED] == str(folder / again["trainer"][checkpoint.SHARDED])
    checkpoint.save(tmp_path, "rm", 0, sharded_state(tmp_path, 10, lose_metadata=True))
    with pytest.warns(UserWarning, match="sharded models and optimisers"):
        path, loaded = checkpoint.load_latest(tmp_path)
    assert path.name == "u000008.pt"
