"""Studies (testbed/cli/study_command.py): a scenario's claims in stages of seeds, written as they run and
resumed stage by stage; the stopping rule (analysis/study_rule.py) on hand-made looks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analysis.protocol import Protocol
from analysis.study_rule import next_stage_fits
from testbed.cli.study_command import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
ARMS = (
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
    "{name: rm16, type: running_mean, args: {window: 16, episodes_per_update: 16}}]"
)
# The tiny policy's reference reward is under the bar's floor, so no seed has a value: the claim stays
# open at every look, and the study runs every stage the protocol plans.
CLAIM = {
    "id": "window_32_over_16", "source": "test", "text": "a 32-reward window realigns faster than 16",
    "x": "rm", "y": "rm16", "endpoint": "episodes_to_bar", "scenario": "tests/data/tiny.yaml",
}  # fmt: skip


def protocol_file(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump({"stages": [2, 3], "budget_core_hours": 5, "claims": [CLAIM], **changes}))
    return path


def test_a_study_runs_its_pilot_then_resumes_at_the_next_stage(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    sets = ["--set", ARMS, "--set", "budget.episodes=64", "--set", "eval.every=32"]
    args = [SCENARIO, "--out", str(tmp_path), "--name", "s", "--protocol", str(protocol_file(tmp_path)), *sets]
    assert main([*args, "--max-stages", "1"]) == 0
    root = tmp_path / "s"
    state = json.loads((root / "study.json").read_text())
    assert len(state["stages"]) == 1 and state["stages"][0]["seeds"] == 2 and state["status"] == "running"
    pilot = json.loads((root / "stage1" / "manifest.json").read_text())
    assert pilot["seeds"] == [0, 1] and pilot["status"] == "done"
    assert state["stages"][0]["claims"][0]["status"] == "open"
    stamp = (root / "stage1" / "manifest.json").stat().st_mtime_ns
    assert main(["--resume", str(root)]) == 0
    state = json.loads((root / "study.json").read_text())
    assert [s["seeds"] for s in state["stages"]] == [2, 3] and state["status"] == "done"
    assert state["stopped_because"] == "the protocol's last stage ran"
    assert json.loads((root / "stage2" / "manifest.json").read_text())["seeds"] == [2]
    assert (root / "stage1" / "manifest.json").stat().st_mtime_ns == stamp  # a finished stage is not run again
    assert "Stage 2: 3 seeds" in (root / "study.md").read_text()
    assert main(["--resume", str(root)]) == 0  # a finished study: nothing to do


def test_a_scenario_without_claims_is_refused_naming_the_protocol(tmp_path, capsys):
    other = dict(CLAIM, scenario="scenarios/style_shift.yaml")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"claims": [other]}))
    assert main([SCENARIO, "--out", str(tmp_path), "--protocol", str(path)]) == 2
    assert "no claim of" in capsys.readouterr().err


def look(statuses: list[str], needed: float = 10, hours: float = 1.0, seeds: int = 5) -> dict:
    claims = [{"claim": f"c{i}", "status": s, "seeds_needed": needed} for i, s in enumerate(statuses)]
    return {"claims": claims, "core_hours": hours, "seeds": seeds}


@pytest.mark.parametrize(
    "result, k, goes_on, why",
    [
        (look(["supported", "equivalent"]), 1, False, "every claim is decided"),
        (look(["open"], needed=500), 1, False, "need more seeds than the protocol's 40"),
        (look(["open"], hours=30.0), 1, False, "the budget"),  # 30 h for 5 seeds: the next 5 cost 30 more
        (look(["open"]), 4, False, "last stage"),
        (look(["open", "supported"]), 1, True, ""),
    ],
)
def test_the_stopping_rule(result, k, goes_on, why):
    protocol = Protocol.model_validate({"stages": [5, 10, 20, 40], "budget_core_hours": 40, "claims": [CLAIM]})
    assert protocol.look_alpha == pytest.approx(0.0125)
    go, reason = next_stage_fits(result, protocol, k)
    assert go == goes_on and why in reason
