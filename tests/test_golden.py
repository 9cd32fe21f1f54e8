"""Behaviour is unchanged by refactors: a tiny run of all three trainers writes the same rows as
the reference tables in tests/data/golden/, on any x86-64 processor.

Two things make that hold on another CPU than the one that wrote the tables:
- portable numerics (testbed/cpu_numerics.py; tests/conftest.py asks for them): the x86-64
  baseline kernels of torch, MKL and oneDNN, the same bits on every processor;
- the run starts from the SFT policy shipped in tests/data/golden/policy/ (this scenario's
  `policy.sft`, trained with portable numerics), so the exact comparison covers the RL steps only:
  SFT's hundreds of steps turn any last-bit difference into another starting policy. SFT itself is
  tested with tolerances (tests/test_sft_quality.py). tests/test_cross_isa.py runs the first
  updates under each kernel choice this machine has.

Regenerate (only for a deliberate, documented change of behaviour or random stream) with
    TESTBED_REGEN_GOLDEN=1 python -m pytest tests/test_golden.py        # the tables
    TESTBED_REGEN_GOLDEN=policy python -m pytest tests/test_golden.py   # the starting policy, then the tables
"""

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from testbed.cli.run_command import main
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
SCENARIO = str(ROOT / "tests/data/golden.yaml")
POLICY = GOLDEN / "policy"
FROM_POLICY = ["--set", f"policy.checkpoint={POLICY}"]  # the shipped starting policy
COLUMNS = {
    "episodes": [
        "arm",
        "seed",
        "t",
        "prompt_id",
        "target_style",
        "judged_style",
        "reward",
        "policy_version",
        "response",
    ],
    "updates": ["arm", "seed", "update", "t", "policy_loss", "reward_mean"],
    "evals": ["arm", "seed", "t", "style", "share"],
}
KEYS = {
    "episodes": ["arm", "seed", "t", "response"],
    "updates": ["arm", "seed", "update"],
    "evals": ["arm", "seed", "t", "style"],
}


def regenerate_policy(tmp_path: Path) -> None:
    """Train the golden scenario's SFT policy, as a run does, in a fresh cache and ship it as POLICY."""
    from testbed.models.sft import load_or_train_policy
    from testbed.runtimes.starting import sft_evaluator
    from testbed.scenario.schema import load_scenario

    os.environ["TESTBED_CACHE"] = str(tmp_path / "regen-cache")
    scenario = load_scenario(SCENARIO)
    load_or_train_policy(scenario.policy, scenario.world.archetypes, evaluate=sft_evaluator(scenario))
    (trained,) = (tmp_path / "regen-cache").glob("policy-*")
    shutil.rmtree(POLICY, ignore_errors=True)
    shutil.copytree(trained, POLICY)


def read_rows(run_dir: Path, table: str) -> pd.DataFrame:
    got = read_table(run_dir, table)[COLUMNS[table]].sort_values(KEYS[table]).reset_index(drop=True)
    return pd.read_csv(pd.io.common.StringIO(got.to_csv(index=False)), keep_default_na=False, na_values=[""])


def golden_rows(table: str) -> pd.DataFrame:
    return pd.read_csv(GOLDEN / f"{table}.csv", keep_default_na=False, na_values=[""])


def test_tiny_run_writes_the_reference_rows(tmp_path, monkeypatch, shared_cache):
    regen = os.environ.get("TESTBED_REGEN_GOLDEN")
    if regen == "policy":
        regenerate_policy(tmp_path)
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code = main([SCENARIO, *FROM_POLICY, "--out", str(tmp_path), "--run-name", "golden", "--no-report"])
    assert code == 0
    assert (
        not (tmp_path / "golden" / "summary.md").exists() and not (tmp_path / "golden" / "figures").exists()
    )  # --no-report
    for table in COLUMNS:
        got = read_rows(tmp_path / "golden", table)
        if regen:
            got.to_csv(GOLDEN / f"{table}.csv", index=False)
            continue
        pd.testing.assert_frame_equal(got, golden_rows(table), check_exact=False, rtol=1e-5, atol=1e-6, obj=table)
    # the arm-independent reference: one row per arm and phase, the same for every arm of the seed
    ref = read_table(tmp_path / "golden", "reference")
    assert len(ref) == 3 * 2 and ref.groupby("phase")["reward"].nunique().eq(1).all()
    if regen:
        pytest.skip("reference tables regenerated")
