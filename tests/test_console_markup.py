"""Judge errors reach the rich console as text, not markup: a scrubbed key's "[redacted]" must
show (rich used to read it as a style tag and print "Incorrect API key provided: Bearer ")."""

from __future__ import annotations

from pathlib import Path

import yaml

import testbed.cli.run_command as cli
from judges.scrub import REDACTED, Scrubber
from testbed.types import Verdict
from tests.test_golden import POLICY

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-console-test-0123456789"
MESSAGE = "judge call failed, not retryable: AuthenticationError (HTTP 401): Incorrect API key provided: Bearer "


class RefusedJudge:
    """Fails every request as an endpoint refusing the key does, with the key scrubbed."""

    async def judge(self, requests):
        text = Scrubber(SECRET)(MESSAGE + SECRET)
        return [Verdict.failed(text) for _ in requests]


def said(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # rich wraps long lines


def test_error_messages_keep_bracketed_text(capsys):
    assert cli.error(f"bad value [bold]x[/bold] and {REDACTED}") == 2
    assert f"[bold]x[/bold] and {REDACTED}" in said(capsys)


def test_a_run_stopped_by_judge_failures_shows_redacted_on_the_console(tmp_path, monkeypatch, capsys, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    scenario = yaml.safe_load((ROOT / "tests/data/golden.yaml").read_text())
    scenario["policy"]["checkpoint"] = str(POLICY)  # the golden test's shipped policy: no SFT here
    scenario.update(
        name="refused",
        arms=scenario["arms"][:1],
        judge={"type": f"{__name__}:RefusedJudge"},
        reliability={"judge_failure_budget": 2},
    )
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert cli.main([str(path), "--out", str(tmp_path / "runs")]) == 3
    err = said(capsys)
    assert f"Incorrect API key provided: Bearer {REDACTED}" in err and SECRET not in err
