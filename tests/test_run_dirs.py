"""The run directory from the CLI's side: one process at a time, a finished run is left alone,
Ctrl-C anywhere leaves a resumable run, and --help does not load the training stack."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

import testbed.cli.run_command as cli
from testbed.models import sft
from testbed.runtimes.dispatch import resolved_dict
from testbed.scenario.schema import load_scenario
from testbed.store import LOCK_NAME, RunStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(sft, "load_or_train_policy", refuse)


def make_run(tmp_path: Path, status: str) -> Path:
    """A run directory as a run leaves it (no checkpoints: it never reached one)."""
    scenario = load_scenario(ROOT / "tests/data/tiny.yaml")
    store = RunStore(tmp_path / "run")
    store.write_scenario(resolved_dict(scenario))
    store.write_manifest({"scenario": "tiny", "status": status, "wall_s": 12.5, "arms": {}, "seeds": [0, 1]})
    return store.root


def test_resuming_a_finished_run_says_so_and_leaves_it_alone(tmp_path, capsys, no_training):
    run = make_run(tmp_path, "done")
    before = (run / "manifest.json").read_bytes()
    assert cli.main(["--resume", str(run)]) == 0
    assert "already finished" in " ".join(capsys.readouterr().err.split())
    assert (run / "manifest.json").read_bytes() == before  # wall time and status untouched
    assert not (run / "discarded").exists()


@pytest.mark.parametrize("extra", [["--runtime", "ray"], ["--set", "budget.episodes=10"]])
def test_resume_refuses_what_would_change_the_saved_scenario(tmp_path, capsys, no_training, extra):
    run = make_run(tmp_path, "stopped")
    before = (run / "manifest.json").read_bytes()
    assert cli.main(["--resume", str(run), *extra]) == 2
    assert "--resume takes only the run directory" in " ".join(capsys.readouterr().err.split())
    assert (run / "manifest.json").read_bytes() == before


def test_resume_of_a_run_whose_manifest_was_cut_short_names_the_file_and_what_to_do(tmp_path, capsys, no_training):
    run = make_run(tmp_path, "stopped")
    manifest = run / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:60])  # a full disk, a copy that stopped
    cut = manifest.read_bytes()
    assert cli.main(["--resume", str(run)]) == 2
    said = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert f"error: {manifest} is damaged (" in said and "(char 60)" in said  # where the JSON stops
    assert f"mv {manifest} {manifest}.damaged" in said and "--resume again" in said
    assert manifest.read_bytes() == cut and not (run / "discarded").exists()  # nothing touched
    lock = FileLock(run / LOCK_NAME, timeout=0)
    lock.acquire()  # and the run directory is let go
    lock.release()
    # what the message says to do works: with the damaged file moved aside, the run opens to resume
    manifest.rename(run / "manifest.json.damaged")
    scenario, store, fresh, state = cli.open_resume(run)
    store.unlock()
    assert scenario.name == "tiny" and fresh["status"] == "running" and fresh["arms"] == {} and state is None


def test_a_second_resume_of_a_run_in_use_is_refused(tmp_path, capsys, no_training):
    run = make_run(tmp_path, "stopped")
    before = (run / "manifest.json").read_bytes()
    held = FileLock(run / LOCK_NAME, timeout=0)
    held.acquire()  # as the first `--resume` holds it
    try:
        assert cli.main(["--resume", str(run)]) == 2
    finally:
        held.release()
    said = " ".join(capsys.readouterr().err.split())
    assert f"{run} is in use by another process" in said
    assert (run / "manifest.json").read_bytes() == before and not (run / "discarded").exists()


def test_ctrl_c_during_sft_prints_the_resume_hint(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "load_or_train_policy", interrupted)
    try:
        code = cli.main([str(ROOT / "tests/data/tiny.yaml"), "--out", str(tmp_path)])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main")
    assert code == 130
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    assert f"--resume{run}" in "".join(capsys.readouterr().err.split())  # rich wraps long paths
    lock = FileLock(run / LOCK_NAME, timeout=0)
    lock.acquire()  # main let go of the run directory
    lock.release()


def test_help_does_not_import_the_training_stack():
    code = (
        "import sys\nfrom testbed.cli.run_command import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_a_failing_report_leaves_the_finished_run_and_says_how_to_write_it_again(tmp_path, monkeypatch, capsys):
    """The report is derived from the run's tables: a bug in it must not fail the run (nor stop a
    sweep before its next point)."""
    import analysis.report
    from testbed.store import read_table
    from tests.test_cpu_numerics import ONE_ARM
    from tests.test_golden import FROM_POLICY, SCENARIO

    def broken(*args, **kwargs):
        raise KeyError("a report bug")

    monkeypatch.setattr(analysis.report, "report", broken)
    assert cli.main([SCENARIO, *FROM_POLICY, *ONE_ARM, "--out", str(tmp_path), "--run-name", "r"]) == 0
    said = capsys.readouterr()
    assert "the report failed" in said.err and f"python -m analysis.report {tmp_path / 'r'}" in said.err
    assert "KeyError: 'a report bug'" in said.err and said.out.strip().endswith(str(tmp_path / "r"))
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["status"] == "done"
    assert len(read_table(tmp_path / "r", "episodes")) == 32


def test_verbose_ends_with_the_reports_tables_and_the_time(tmp_path, capsys):
    from tests.test_cpu_numerics import ONE_ARM
    from tests.test_golden import FROM_POLICY, SCENARIO

    assert cli.main([SCENARIO, *FROM_POLICY, *ONE_ARM, "--out", str(tmp_path), "--run-name", "r", "--verbose"]) == 0
    said = capsys.readouterr().err
    assert "Arms - r" in said and "Realignment after each switch" in said and f"report: {tmp_path / 'r'}" in said
    assert said.rstrip().splitlines()[-1].startswith("time: ") and "report in " not in said  # not the short ending
