"""`numerics: portable | native` (testbed/cpu_numerics.py): the environment each mode sets, the
check that a process computes in the scenario's mode, the CLI starting itself again in the other
mode, the manifest's record, and the report's warning for runs with different numerics."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch

from analysis.report import RunData
from analysis.run_numerics import numerics_warnings
from testbed import cpu_numerics
from testbed.cli.run_command import main
from testbed.models.sft import loss_curve
from testbed.scenario.schema import ScenarioError, load_scenario
from tests.test_golden import FROM_POLICY, ROOT, SCENARIO

ONE_ARM = [
    "--set",
    "arms=[{name: rm, type: running_mean, args: {window: 16, episodes_per_update: 16}}]",
    "--set",
    "budget.episodes=32",
    "--set",
    "eval.every=32",
    "--set",
    "eval.prompts=4",
]


def test_portable_pins_the_kernels_and_native_removes_only_what_portable_pinned():
    portable = cpu_numerics.environment_for("portable", {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx2"})
    assert {
        k: portable[k] for k in cpu_numerics.PORTABLE_ENV
    } == cpu_numerics.PORTABLE_ENV  # the user's avx2 overridden
    assert portable["TESTBED_NUMERICS"] == "portable" and portable["PATH"] == "/bin"
    native = cpu_numerics.environment_for("native", portable)
    assert not set(cpu_numerics.PORTABLE_ENV) & set(native) and cpu_numerics.PINNED_VAR not in native
    own = cpu_numerics.environment_for("native", {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2"})
    assert own["ATEN_CPU_CAPABILITY"] == "default" and own["MKL_CBWR"] == "AVX2"  # a user's own choice stays


def test_an_unknown_mode_is_refused_naming_the_variable_and_the_field(tmp_path):
    with pytest.raises(ValueError, match="TESTBED_NUMERICS='fast'"):
        cpu_numerics.requested_mode({"TESTBED_NUMERICS": "fast"})
    with pytest.raises(ScenarioError, match="numerics"):
        load_scenario(SCENARIO, ["numerics=fast"])


def test_this_test_process_computes_with_portable_kernels():
    assert cpu_numerics.mode_in_force() == "portable" and cpu_numerics.mode_problem("portable") is None
    assert torch.backends.cpu.get_cpu_capability() == cpu_numerics.PORTABLE_CAPABILITY
    assert "numerics: native" in cpu_numerics.mode_problem("native")
    cpu_numerics.configure_torch(1)
    described = cpu_numerics.describe()
    assert described["mode"] == "portable" and described["deterministic_algorithms"] and described["torch_threads"] == 1
    assert described["env"]["MKL_CBWR"] == "COMPATIBLE" and described["blas"] == "mkl" and described["cpu"]["model"]
    assert cpu_numerics.numerics_tag() == "portable"


def test_a_scenario_in_the_other_mode_is_refused_in_process_with_nothing_written(tmp_path, capsys):
    assert main([SCENARIO, *FROM_POLICY, *ONE_ARM, "--set", "numerics=native", "--out", str(tmp_path)]) == 2
    assert "numerics: native" in " ".join(capsys.readouterr().err.split())
    assert not list(tmp_path.iterdir())


def test_the_cli_starts_itself_again_in_the_scenarios_mode_and_the_manifest_says_so(tmp_path):
    env = cpu_numerics.environment_for(
        "portable",
        {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "TESTBED_CACHE": str(tmp_path / "cache"),
            "HF_HUB_OFFLINE": "1",
        },
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.run",
            SCENARIO,
            *FROM_POLICY,
            *ONE_ARM,
            "--set",
            "numerics=native",
            "--out",
            str(tmp_path),
            "--run-name",
            "native",
            "--no-report",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "starting again with TESTBED_NUMERICS=native" in out.stderr
    numerics = json.loads((tmp_path / "native" / "manifest.json").read_text())["numerics"]
    assert numerics["mode"] == "native" and numerics["torch_cpu_capability"] != "DEFAULT"
    assert numerics["env"]["ATEN_CPU_CAPABILITY"] is None and not numerics["deterministic_algorithms"]


def run_with(name: str, numerics: dict | None) -> RunData:
    empty = pd.DataFrame()
    return RunData(
        path=ROOT,
        manifest={"numerics": numerics} if numerics else {},
        episodes=empty,
        updates=empty,
        evals=empty,
        name=name,
    )


def test_the_report_warns_when_runs_side_by_side_used_different_numerics():
    portable = {
        "mode": "portable",
        "torch_cpu_capability": "DEFAULT",
        "mkl": "2024.2",
        "torch_threads": 1,
        "cpu": {"model": "CPU A", "isa_flags": ["avx2"]},
    }
    elsewhere = {**portable, "cpu": {"model": "CPU B", "isa_flags": ["avx2", "avx512f"]}}
    assert (
        numerics_warnings([run_with("a", portable), run_with("b", elsewhere)]) == []
    )  # portable: the CPU does not count
    assert numerics_warnings([run_with("a", portable)]) == []
    native = {**elsewhere, "mode": "native", "torch_cpu_capability": "AVX512"}
    runs = [run_with("a", portable), run_with("b", native), run_with("old", None)]
    (warning,) = numerics_warnings(runs)
    assert "a (portable, DEFAULT kernels, CPU A)" in warning and "b (native, AVX512 kernels, CPU B)" in warning
    assert "old (not recorded)" in warning and runs[1].notes == ["numerics: native, AVX512 kernels, CPU B"]
    two_natives = [run_with("x", {**native, "cpu": {"model": "CPU A", "isa_flags": ["avx2"]}}), run_with("y", native)]
    assert numerics_warnings(two_natives)  # native rows are their processor's


def test_the_loss_curve_is_the_mean_of_each_full_block():
    assert loss_curve([4.0, 2.0, 3.0, 1.0, 9.0], every=2) == [3.0, 2.0]  # the last, partial block is left out
    assert loss_curve([1.0], every=2) == []


def test_the_makefile_exports_the_same_variables():
    text = (ROOT / "Makefile").read_text()
    exported = dict(re.findall(r"^export (ATEN_CPU_CAPABILITY|MKL_CBWR|ONEDNN_MAX_CPU_ISA) := (\S+)$", text, re.M))
    assert exported == cpu_numerics.PORTABLE_ENV
    assert f"export {cpu_numerics.PINNED_VAR} := {' '.join(cpu_numerics.PORTABLE_ENV)}" in text
