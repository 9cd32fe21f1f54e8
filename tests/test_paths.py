"""One cache directory for every cache (testbed/paths.py): the SFT policy, the critic and the
judge's verdicts agree on it, and an empty TESTBED_CACHE means unset."""

from __future__ import annotations

from pathlib import Path

import pytest

from judges.cache import VerdictCache, default_cache_path
from testbed.models.sft import cache_root
from testbed.paths import cache_dir


@pytest.mark.parametrize("value", [None, ""])
def test_unset_or_empty_means_the_home_cache(monkeypatch, tmp_path, value):
    monkeypatch.setenv("HOME", str(tmp_path))
    if value is None:
        monkeypatch.delenv("TESTBED_CACHE", raising=False)
    else:
        monkeypatch.setenv("TESTBED_CACHE", value)  # `TESTBED_CACHE= python ...`: not the current dir
    home = tmp_path / ".cache" / "testbed"
    assert cache_dir() == cache_root() == home
    assert default_cache_path() == home / "judge_cache.sqlite"


def test_set_moves_every_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == cache_root() == tmp_path / "elsewhere"
    cache = VerdictCache()
    try:
        assert cache.path == tmp_path / "elsewhere" / "judge_cache.sqlite" and cache.path.is_file()
    finally:
        cache.close()
    assert not (Path.cwd() / "judge_cache.sqlite").exists()
