"""A SQLite cache of judge verdicts, so a rerun (or a resumed run) pays no judge call twice.

The key is a SHA-256 over (model, template version, prompt, response, target style, candidate
styles in order, topic, endpoint, request settings): anything that could change the verdict. The
settings are the judge's temperature, max_tokens, thinking, JSON mode, truncation retry and extra
parameters (judges/request.py, `Requests.cache_fields`): a verdict made with thinking on is never
served to a judge with thinking off. Only successful verdicts are stored; an error is never
cached. Values are small JSON documents.

Safe under concurrent writers (threads and processes): WAL journal, a busy timeout, and
`INSERT OR IGNORE` (the first writer of a key wins; every writer of a key writes the same value
for a deterministic judge anyway). One connection per thread. `synchronous=NORMAL` in WAL mode
keeps commits cheap; a crash can lose the last few inserts but never corrupts the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.paths import cache_dir

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS verdicts "
    "(key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL DEFAULT (julianday('now')))"
)
_CHUNK = 500  # keys per SELECT ... IN (...)


def default_cache_path() -> Path:
    return cache_dir() / "judge_cache.sqlite"


def cache_key(
    model: str,
    template_version: str,
    prompt: str,
    response: str,
    target_style: str,
    candidates: Sequence[str],
    topic: str | None,
    endpoint: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """`endpoint` is where the verdict came from (the api_base): another server that answers to
    the same model name may judge differently, so it must not be served this one's verdicts.
    `settings`: the request settings that change a verdict (JSON values; key order does not
    matter). None for either leaves it out of the key."""
    fields: list[object] = [model, template_version, prompt, response, target_style, list(candidates), topic]
    if endpoint is not None:
        fields.append(endpoint)
    if settings is not None:
        fields.append({"settings": dict(settings)})
    payload = json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


class VerdictCache:
    """`get_many(keys) -> {key: value}`, `put(key, value)`, `put_many(items)`; values are dicts."""

    def __init__(self, path: str | os.PathLike[str] | None = None, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path) if path else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._conn()  # create the file and table now, so errors surface at construction

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            for attempt in range(50):  # switching to WAL needs a moment without other writers
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError:
                    if attempt == 49:
                        raise
                    threading.Event().wait(0.05)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        keys = list(dict.fromkeys(keys))
        out: dict[str, dict[str, Any]] = {}
        conn = self._conn()
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            rows = conn.execute(f"SELECT key, value FROM verdicts WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            for key, value in rows:
                out[key] = json.loads(value)
        return out

    def get(self, key: str) -> dict[str, Any] | None:
        return self.get_many([key]).get(key)

    def put_many(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        rows = [(k, json.dumps(v, ensure_ascii=False)) for k, v in items]
        if not rows:
            return
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR IGNORE INTO verdicts (key, value) VALUES (?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.put_many([(key, value)])

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()
