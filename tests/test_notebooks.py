"""The notebooks and the report run for real against a run of the tiny scenario. The notebooks are
kept as jupytext percent scripts (analysis/notebooks/<name>.py) paired with <name>.ipynb: the
script is what the tests execute, the .ipynb must hold the same cells and no outputs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
ANALYSIS = ROOT / "analysis" / "notebooks"
NOTEBOOKS = ("realignment", "compare_runs")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, shared_cache) -> Path:
    tmp = tmp_path_factory.mktemp("tiny")
    # the session's policy cache, so the tiny SFT (tested in test_end_to_end) is trained once per
    # session; TESTBED_TEST_CACHE points at an existing one instead, to rerun the notebooks quickly
    env = {**os.environ, "TESTBED_CACHE": os.environ.get("TESTBED_TEST_CACHE") or str(shared_cache)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.run",
            "tests/data/tiny.yaml",
            "--out",
            str(tmp / "runs"),
            "--set",
            "budget.episodes=96",
            "--set",
            "seeds=[0,1]",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = Path(proc.stdout.strip().splitlines()[-1])
    assert (run / "manifest.json").exists()
    return run


def execute(name: str, env: dict[str, str | None]) -> nbformat.NotebookNode:
    """Run the percent script `analysis/notebooks/<name>.py` as a notebook (a None in `env` unsets it)."""
    nb = jupytext.read(ANALYSIS / f"{name}.py")
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():  # the kernel inherits the environment
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ANALYSIS)}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def outputs(nb, kind):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if kind(o)]


def cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nb.cells]


def test_notebooks_are_paired_scripts_stored_without_outputs():
    for name in NOTEBOOKS:
        script, stored = jupytext.read(ANALYSIS / f"{name}.py"), nbformat.read(ANALYSIS / f"{name}.ipynb", as_version=4)
        nbformat.validate(stored)
        assert stored.metadata["jupytext"]["formats"] == "ipynb,py:percent"
        assert cells(stored) == cells(script), f"{name}.ipynb and {name}.py differ: run `jupytext --sync`"
        code = [c for c in stored.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code)
        assert 'os.environ.get("TESTBED_RUN_DIR' in code[0].source


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under folder: its modification time and contents' hash."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_realignment_notebook_runs(tiny_run):
    """With no TESTBED_NOTEBOOK_OUT, the figures go to the run's notebook_figures/realignment/; the
    report's figures (the run's figures/, written by the run) and the docs' images stay as they were."""
    report_figures, docs = snapshot(tiny_run / "figures"), snapshot(ROOT / "docs")
    assert len(report_figures) >= 5
    nb = execute("realignment", {"TESTBED_RUN_DIR": str(tiny_run), "TESTBED_NOTEBOOK_OUT": None})
    assert not outputs(nb, lambda o: o.output_type == "error")
    assert len(outputs(nb, lambda o: "image/png" in o.get("data", {}))) >= 5
    out = tiny_run / "notebook_figures" / "realignment"
    for name in ("realignment", "realignment_speed", "target_share", "reward_vs_judge_calls", "training_diagnostics"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name
    markdown = " ".join(o["data"]["text/markdown"] for o in outputs(nb, lambda o: "text/markdown" in o.get("data", {})))
    assert "Per segment" in markdown and "dynamic regret" in markdown  # the tables summary.md has
    assert snapshot(tiny_run / "figures") == report_figures
    assert snapshot(ROOT / "docs") == docs


def test_notebook_figures_never_go_to_the_reports_folder(tmp_path, monkeypatch):
    from analysis.notebooks.helpers import figure_dir

    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    monkeypatch.delenv("TESTBED_NOTEBOOK_OUT", raising=False)
    assert figure_dir(run, "realignment") == run / "notebook_figures" / "realignment"
    monkeypatch.setenv("TESTBED_NOTEBOOK_OUT", str(tmp_path / "mine"))
    assert figure_dir(run, "realignment") == tmp_path / "mine"
    for refused in (run / "figures", ROOT / "docs" / "results"):
        monkeypatch.setenv("TESTBED_NOTEBOOK_OUT", str(refused))
        with pytest.raises(ValueError, match="TESTBED_NOTEBOOK_OUT elsewhere"):
            figure_dir(run, "realignment")


def test_compare_notebook_runs(tiny_run, tmp_path):
    env = {"TESTBED_RUN_DIRS": os.pathsep.join([str(tiny_run), str(tiny_run)]), "TESTBED_NOTEBOOK_OUT": str(tmp_path)}
    nb = execute("compare_runs", env)
    assert not outputs(nb, lambda o: o.output_type == "error")
    assert len(outputs(nb, lambda o: "image/png" in o.get("data", {}))) >= 5
    assert (tmp_path / "realignment.png").exists() and (tmp_path / "realignment_speed.png").exists()


def test_report_on_the_tiny_run(tiny_run, tmp_path):
    from analysis.report import report

    out = report([tiny_run], out_dir=tmp_path)
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["switch"]) == {1, 2} and set(summary["seeds"]) == {2}
    assert "After each switch" in (out / "summary.md").read_text()
    assert len(list((out / "figures").glob("*.png"))) >= 5
