"""The golden scenario's first updates under every kernel choice this processor can run
(ATEN_CPU_CAPABILITY default and avx2, avx512 where the CPU has it; MKL's and oneDNN's matching
branches): with `numerics: portable` the rows are the same bits under each, since portable
overrides whatever a user's environment asks; with `native` they differ, which shows the
comparison can fail. Each run is a fresh process: the variables are read when torch loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.cpu_numerics import PINNED_VAR, PORTABLE_ENV, cpu_description
from testbed.store import read_table
from tests.test_golden import FROM_POLICY, ROOT, SCENARIO

FLAGS = set(cpu_description()["isa_flags"])
# what a user's environment could ask for on this CPU: (ATen, MKL, oneDNN)
CHOICES = {"default": ("default", "COMPATIBLE", "SSE41")}
if "avx2" in FLAGS:
    CHOICES["avx2"] = ("avx2", "AVX2", "AVX2")
if {"avx512f", "avx512bw", "avx512vl"} <= FLAGS:
    CHOICES["avx512"] = ("avx512", "AVX512", "AVX512_CORE")
FIRST_UPDATES = ["--set", "budget.episodes=32", "--set", "eval.every=16", "--set", "eval.prompts=4"]


def run_first_updates(tmp_path: Path, mode: str, choice: str) -> dict[str, pd.DataFrame]:
    """Every column of the three tables, from a fresh process with `choice`'s variables inherited."""
    aten, mkl, onednn = CHOICES[choice]
    env = {key: value for key, value in os.environ.items() if key not in (*PORTABLE_ENV, PINNED_VAR)}
    env.update(
        TESTBED_NUMERICS=mode,
        ATEN_CPU_CAPABILITY=aten,
        MKL_CBWR=mkl,
        ONEDNN_MAX_CPU_ISA=onednn,
        TESTBED_CACHE=str(tmp_path / f"cache-{mode}-{choice}"),
    )
    name = f"{mode}-{choice}"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.run",
            SCENARIO,
            *FROM_POLICY,
            *FIRST_UPDATES,
            "--set",
            f"numerics={mode}",
            "--out",
            str(tmp_path),
            "--run-name",
            name,
            "--no-report",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    tables = {}
    for table in ("episodes", "updates", "evals"):
        rows = read_table(tmp_path / name, table)
        rows = rows.drop(
            columns=[c for c in rows.columns if c.endswith("_s") or c in ("wall", "time")], errors="ignore"
        )
        tables[table] = rows.sort_values([c for c in ("arm", "seed", "t", "update", "style") if c in rows]).reset_index(
            drop=True
        )
    assert len(tables["updates"]) >= 6  # two updates per arm at least
    return tables


def differing(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> list[str]:
    """The table.column pairs whose values are not the same bits (NaN equal to NaN)."""
    out = []
    for table in a:
        assert list(a[table].columns) == list(b[table].columns) and len(a[table]) == len(b[table])
        for column in a[table].columns:
            x, y = a[table][column], b[table][column]
            if not ((x == y) | (x.isna() & y.isna())).all():
                out.append(f"{table}.{column}")
    return out


@pytest.mark.skipif(len(CHOICES) < 2, reason="this CPU runs only the baseline kernels")
def test_portable_rows_are_the_same_bits_under_every_kernel_choice_and_native_ones_are_not(tmp_path):
    portable = {choice: run_first_updates(tmp_path, "portable", choice) for choice in CHOICES}
    first = next(iter(CHOICES))
    for choice in CHOICES:
        assert differing(portable[first], portable[choice]) == [], f"portable rows differ under {choice}"
    native = {choice: run_first_updates(tmp_path, "native", choice) for choice in ("default", "avx2")}
    changed = differing(native["default"], native["avx2"])
    assert "updates.policy_loss" in changed, changed  # the kernels change the bits: the check can fail
