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
