"""One cache directory for every cache (testbed/paths.py): the SFT policy, the critic and the
judge's verdicts agree on it, and an empty TESTBED_CACHE means unset."""

from __future__ import annotations

from pathlib import Path

import pytest

from judges.cache import VerdictCache, default_cache_path
from testbed.models import sft
from testbed.models.sft import cache_root
from testbed.paths import cache_dir, source_fingerprint
from testbed.scenario.schema import PolicyConfig


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


def test_source_fingerprint_follows_python_code_only(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    first = source_fingerprint("pkg", root=tmp_path)
    (pkg / "notes.md").write_text("not code")
    assert source_fingerprint("pkg", root=tmp_path) == first  # lru-cached per arguments, so recompute below
    source_fingerprint.cache_clear()
    assert source_fingerprint("pkg", root=tmp_path) == first
    (pkg / "sub" / "b.py").write_text("y = 2.0\n")  # a change that only moves rounding still counts
    source_fingerprint.cache_clear()
    assert source_fingerprint("pkg", root=tmp_path) != first
    assert source_fingerprint("pkg/a.py", root=tmp_path) != source_fingerprint("pkg", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="missing"):
        source_fingerprint("missing", root=tmp_path)


def test_the_sft_key_changes_with_the_code_that_trains_it(monkeypatch):
    """A cached policy trained by older code is never reused (a stale cache once hid a golden-row change)."""
    cfg = PolicyConfig()
    before = sft.policy_key(cfg, ["cute", "plain"])
    monkeypatch.setattr(sft, "source_fingerprint", lambda *parts: "other-code")
    assert sft.policy_key(cfg, ["cute", "plain"]) != before
