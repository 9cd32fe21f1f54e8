"""A claim's reproduce command on the card runs, and its run is what the card reads: the command the
card prints for the claim (`python -m testbed.run scenarios/X.yaml`), through the real CLI at tiny
size (tests/data/tiny.yaml's policy and sizes, the claim's two arms with small batches, two seeds),
gives a run on which the card judges that claim and prints the same command again."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from analysis.claims import card_rows
from analysis.protocol import load_protocol
from analysis.report import analyse, load_run

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
SMALL = {"episodes_per_update": 16, "value_pretrain_samples": 32, "value_warmup_updates": 1, "baseline_samples": 2}


def tiny_arms(scenario: dict, names: tuple[str, ...]) -> list[dict]:
    """The scenario's own arms named by the claim, their batches and warm-ups made small."""
    arms = []
    for arm in scenario["arms"]:
        if arm["name"] in names:
            args = dict(arm.get("args") or {})
            args.update({k: v for k, v in SMALL.items() if k in args or (k == "episodes_per_update")})
            arms.append({**arm, "args": args})
    assert [a["name"] for a in arms] == [n for n in (a["name"] for a in scenario["arms"]) if n in names]
    return arms


# One claim: each scenario trains its own tiny SFT policy (about a minute here), and the path from the
# printed command to the card's row is the same for every claim.
@pytest.mark.parametrize("claim_id", ["sao_vs_running_mean"])
def test_the_cards_command_makes_a_run_that_the_card_judges(claim_id, tmp_path, shared_cache, monkeypatch):
    from testbed.cli.run_command import main

    protocol = load_protocol()
    claim = next(c for c in protocol.claims if c.id == claim_id)
    (printed,) = [r["command"] for r in card_rows([], protocol) if r["claim"].id == claim_id]
    words = shlex.split(printed)
    assert words[:3] == ["python", "-m", "testbed.run"] and words[3] == claim.scenario  # nothing else to add
    scenario = yaml.safe_load((ROOT / words[3]).read_text())
    scenario.update(
        policy=TINY["policy"],
        sampling={**TINY["sampling"], **{k: v for k, v in scenario["sampling"].items() if k == "streams"}},
        arms=tiny_arms(scenario, (claim.x, claim.y)),
        seeds=[0, 1],
        budget={"episodes": 192},
        eval={"every": 64, "prompts": 16, "reference_samples": 1},
        runtime={"parallel_arms": False},
    )
    tiny = tmp_path / Path(words[3]).name  # the scenario's own file name: the card names its run by it
    tiny.write_text(yaml.safe_dump(scenario))
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    out = tmp_path / "runs"
    assert main([str(tiny), "--out", str(out), "--no-report"]) == 0
    (run_dir,) = out.iterdir()
    row = next(r for r in card_rows([analyse([load_run(run_dir)])], protocol) if r["claim"].id == claim_id)
    assert row["verdict"] not in ("not run", "not testable", "not testable in this runtime"), row
    assert row["estimate"].startswith(f"episodes to the bar, {claim.x} − {claim.y}: ")
    assert row["run"].startswith(run_dir.name)
    assert row["command"] == printed
