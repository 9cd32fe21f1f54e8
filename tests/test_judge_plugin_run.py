"""A judge plugin's bug stops a run at once with its traceback (exit 2); an outage is counted
against the failure budget (exit 3 with a checkpoint), as before."""

from pathlib import Path

from testbed.cli.run_command import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests/data/golden.yaml")
ONE_ARM = [
    "--set",
    f"policy.checkpoint={ROOT / 'tests/data/golden/policy'}",
    "--set",
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}]",
    "--set",
    "reliability.judge_failure_budget=4",
    "--no-report",
]


def key_error_judge(request):
    return {"quality": 1, "style": {"cute": "cute"}[request.topic]}  # KeyError: a bug


def timing_out_judge(request):
    raise TimeoutError("judge endpoint timed out")


def test_a_judge_that_raises_key_error_stops_the_run_with_its_traceback(tmp_path, capsys):
    code = main(
        [
            SCENARIO,
            *ONE_ARM,
            "--set",
            "judge={type: 'tests.test_judge_plugin_run:key_error_judge'}",
            "--out",
            str(tmp_path),
            "--run-name",
            "bug",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "KeyError" in err and "key_error_judge" in err  # the plugin's own frame
    assert '"status": "failed"' in (tmp_path / "bug" / "manifest.json").read_text()


def test_a_judge_that_times_out_is_an_outage_that_the_budget_stops(tmp_path, capsys):
    code = main(
        [
            SCENARIO,
            *ONE_ARM,
            "--set",
            "judge={type: 'tests.test_judge_plugin_run:timing_out_judge'}",
            "--out",
            str(tmp_path),
            "--run-name",
            "outage",
        ]
    )
    assert code == 3  # stopped with a checkpoint to resume from, after the failure budget
    assert "judge_failure_budget=4" in capsys.readouterr().err
