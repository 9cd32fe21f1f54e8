"""Behaviour is unchanged by refactors: a tiny run of all three trainers writes the same rows as
the reference tables in tests/data/golden/, which were written before the refactor.

Regenerate them (only for a deliberate, documented change of behaviour or random stream) with
    TESTBED_REGEN_GOLDEN=1 python -m pytest tests/test_golden.py
"""

import os
from pathlib import Path

import pandas as pd
import pytest

from testbed.run import main
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
COLUMNS = {
    "episodes": ["arm", "seed", "t", "prompt_id", "target_style", "judged_style", "reward", "policy_version", "response"],
    "updates": ["arm", "seed", "update", "t", "policy_loss", "reward_mean"],
    "evals": ["arm", "seed", "t", "style", "share"],
}
KEYS = {"episodes": ["arm", "seed", "t", "response"], "updates": ["arm", "seed", "update"], "evals": ["arm", "seed", "t", "style"]}


def test_tiny_run_writes_the_reference_rows(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code = main([str(ROOT / "tests/data/golden.yaml"), "--out", str(tmp_path), "--run-name", "golden", "--no-report"])
    assert code == 0
    assert not (tmp_path / "golden" / "summary.md").exists() and not (tmp_path / "golden" / "figures").exists()  # --no-report
    for table, columns in COLUMNS.items():
        got = read_table(tmp_path / "golden", table)[columns].sort_values(KEYS[table]).reset_index(drop=True)
        path = GOLDEN / f"{table}.csv"
        if os.environ.get("TESTBED_REGEN_GOLDEN"):
            got.to_csv(path, index=False)
            continue
        want = pd.read_csv(path, keep_default_na=False, na_values=[""])
        got = pd.read_csv(pd.io.common.StringIO(got.to_csv(index=False)), keep_default_na=False, na_values=[""])
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, atol=1e-6, obj=table)
    if os.environ.get("TESTBED_REGEN_GOLDEN"):
        pytest.skip("reference tables regenerated")
