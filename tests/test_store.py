"""The run directory's tables: durable parts, readable as one table, flushed by rows or time."""

import time

from testbed.store import RunStore, read_table


def test_rows_flush_in_parts_and_read_back_in_order(tmp_path):
    store = RunStore(tmp_path / "run", flush_rows=3, flush_seconds=3600)
    store.append("episodes", [{"t": i, "reward": float(i % 2)} for i in range(5)])
    assert len(read_table(store.root, "episodes")) == 5  # 5 >= 3: flushed as one part
    store.append("episodes", [{"t": 5, "reward": 1.0}])
    assert len(read_table(store.root, "episodes")) == 5  # buffered, not yet durable
    store.flush()
    table = read_table(store.root, "episodes")
    assert table["t"].tolist() == list(range(6))
    assert not list((store.root / "episodes.parquet").glob("*.tmp"))


def test_time_based_flush(tmp_path):
    store = RunStore(tmp_path / "run", flush_rows=10_000, flush_seconds=0.05)
    store.append("updates", [{"update": 1}])
    time.sleep(0.1)
    store.append("updates", [{"update": 2}])
    assert read_table(store.root, "updates")["update"].tolist() == [1, 2]


def test_missing_table_reads_empty(tmp_path):
    assert read_table(tmp_path, "evals").empty


def test_create_never_reuses_a_directory(tmp_path):
    a = RunStore.create(tmp_path, "s")
    b = RunStore.create(tmp_path, "s")
    assert a.root != b.root and a.root.name.startswith("s-") and b.root.exists()


def test_rows_with_different_keys_keep_every_column(tmp_path):
    store = RunStore(tmp_path / "run", flush_rows=100)
    store.append("updates", [{"update": 1, "critic_loss": 0.5, "value_warmup": 1.0}])
    store.append("updates", [{"update": 2, "critic_loss": 0.4, "policy_loss": -0.1}])
    store.flush()
    table = read_table(store.root, "updates")
    assert table["policy_loss"].isna().tolist() == [True, False]
    assert table["value_warmup"].tolist()[0] == 1.0 and table["critic_loss"].tolist() == [0.5, 0.4]


def test_a_truncated_part_is_skipped_with_a_warning_and_refused_on_resume(tmp_path):
    import pytest

    from testbed.store import CorruptRunError

    store = RunStore(tmp_path / "run", flush_rows=2)
    store.append("episodes", [{"t": 0}, {"t": 1}])
    snapshot = store.snapshot()
    store.append("episodes", [{"t": 2}, {"t": 3}])
    second = sorted((store.root / "episodes.parquet").glob("part-*"))[1]
    second.write_bytes(second.read_bytes()[:-20])  # a torn write
    with pytest.warns(UserWarning, match=f"skipping .*{second.name}: checksum mismatch"):
        assert read_table(store.root, "episodes")["t"].tolist() == [0, 1]
    first = sorted((store.root / "episodes.parquet").glob("part-*"))[0]
    with open(first, "r+b") as fh:  # one flipped byte in a part the checkpoint relies on
        fh.seek(40)
        byte = fh.read(1)
        fh.seek(40)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRunError, match=first.name):
        RunStore(store.root, flush_rows=2).restore(snapshot)


def test_restore_moves_later_parts_aside_and_new_parts_continue_the_numbering(tmp_path):
    store = RunStore(tmp_path / "run", flush_rows=2)
    store.append("updates", [{"update": 1}, {"update": 2}])
    snapshot = store.snapshot()
    store.append("updates", [{"update": 3}, {"update": 4}])
    (store.root / "updates.parquet" / "part-000009.tmp").write_bytes(b"half a part")
    reopened = RunStore(store.root, flush_rows=2)
    moved = reopened.restore(snapshot)
    assert len(moved["updates"]) == 2 and (store.root / "discarded" / "updates").is_dir()
    assert read_table(store.root, "updates")["update"].tolist() == [1, 2]
    reopened.append("updates", [{"update": 3}, {"update": 4}])
    assert read_table(store.root, "updates")["update"].tolist() == [1, 2, 3, 4]


def test_a_named_run_directory_is_never_reused_and_an_unwritable_one_fails_early(tmp_path):
    import pytest

    RunStore.create(tmp_path, "s", run_name="mine")
    with pytest.raises(FileExistsError, match="--resume"):
        RunStore.create(tmp_path, "s", run_name="mine")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):
        RunStore.create(tmp_path / "a-file", "s")


def test_only_plain_run_names_are_accepted(tmp_path):
    import pytest

    out = tmp_path / "out"
    for name in ["", ".", "..", "../x", "../../x", "a/b", "/abs", "x\x00y", "sp ace"]:
        with pytest.raises(ValueError, match="plain name"):
            RunStore.create(out, "s", run_name=name)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["out"])  # nothing written beside --out
    assert not out.exists() or not any(out.iterdir())
    assert RunStore.create(out, "s", run_name="ok-1.2_x").root == out / "ok-1.2_x"


def test_a_new_run_directory_is_locked_until_released(tmp_path):
    import pytest
    from filelock import FileLock, Timeout

    from testbed.store import LOCK_NAME, RunInUseError

    store = RunStore.create(tmp_path, "s")
    other = FileLock(store.root / LOCK_NAME, timeout=0)
    with pytest.raises(Timeout):
        other.acquire()
    with pytest.raises(RunInUseError, match=f"{store.root} is in use by another process"):
        RunStore(store.root).lock()
    store.unlock()
    other.acquire()  # free once its owner lets go
    other.release()
