"""A drift schedule in simulated seconds (`schedule.clock: sim_seconds`): it switches at its time on
each arm x seed's own clock (episodes judged before the switch second get the old style, after it
the new one), each pair records the episode where it met the switch, the analysis measures each
pair's realignment from that episode, in episodes and in seconds; other runtimes refuse it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis import cluster
from analysis.run_data import RunData, load_run
from testbed.cli.run_command import main
from testbed.envs.schedules import Phase, PiecewiseSchedule
from testbed.envs.schedules.sim_time import SimTimeSchedule
from testbed.scenario.loading import ScenarioError
from testbed.scenario.schema import load_scenario
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
CANDIDATES = "candidates: [academic, cute, chuunibyou]"
TIMED = (
    "schedule={type: piecewise, clock: sim_seconds, horizon_s: 100, args: {unit: seconds, phases: ["
    f"{{style: cute, start: 0, end: 4, {CANDIDATES}}}, {{style: chuunibyou, start: 4, end: 100, {CANDIDATES}}}]}}}}"
)


def test_the_wrapper_answers_by_the_time_each_clock_was_judged():
    inner = PiecewiseSchedule(
        [Phase("cute", 0, 10, ("cute", "classical")), Phase("classical", 10, 100, ("cute", "classical"))]
    )
    timed = SimTimeSchedule(inner)
    assert timed.switch_seconds() == [10] and timed.switch_points() == []  # nothing realised before the run
    timed.at(3.0, 0)  # episodes 0.. are judged at 3 s
    timed.at(9.99, 5)  # 5.. at 9.99 s
    assert [timed.target(t).style for t in (0, 4, 5, 7)] == ["cute"] * 4
    timed.at(10.0, 8)  # 8.. at 10 s: the switch
    assert timed.target(7).style == "cute" and timed.target(8).style == "classical"
    assert timed.switch_points() == [8] and timed.seconds_of(2) == 3.0
    with timed.pinned(50):
        assert timed.target(0).style == "classical"
    assert timed.target(0).style == "cute"
    with pytest.raises(ValueError, match="only move forward"):
        timed.at(9.0, 9)
    assert timed.fresh().switch_points() == []  # another arm x seed starts on its own clock


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["runtime.kind=sync"], "schedule.clock: sim_seconds needs runtime.kind: simulated"),
        (["runtime.kind=simulated", "schedule.horizon_s=null"], "schedule.horizon_s"),
        (["runtime.kind=simulated", "schedule.args.unit=episodes"], "schedule.args.unit"),
    ],
)
def test_a_schedule_in_seconds_is_refused_where_it_cannot_run(sets, field):
    with pytest.raises(ScenarioError, match=field):
        load_scenario(SCENARIO, [TIMED, *sets])


def test_a_schedule_in_seconds_switches_at_its_time_on_each_arms_clock(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    arms = (
        "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 8}}, "
        "{name: grpo, type: grpo, args: {group_size: 4, episodes_per_update: 8}}]"
    )
    simulation = (
        "runtime.simulation={rollout_slots: 16, latency: {per_token_s: 0.05, spread: 0.8, straggler_share: 0.1, "
        "straggler_factor: 8}, learner: {fixed_s: 0.2, per_token_s: 0.0005, sync_s: 0.1}}"
    )
    small = ["seeds=[0]", "budget.episodes=32", "eval.every=32", "eval.prompts=8", "eval.reference_samples=1"]
    sets = [*small, arms, "runtime.kind=simulated", simulation, TIMED]
    assert (
        main(
            [
                SCENARIO,
                "--out",
                str(tmp_path),
                "--run-name",
                "timed",
                "--no-report",
                *[a for s in sets for a in ("--set", s)],
            ]
        )
        == 0
    )
    run_dir = tmp_path / "timed"
    episodes = read_table(run_dir, "episodes")
    ok = episodes[episodes["judge_error"].isna()]
    # judged before 4 s against cute, at or after it against chuunibyou, on both arms
    before = ok["sim_judged_s"] < 4
    assert before.any() and (~before).any()
    assert (ok.loc[before, "target_style"] == "cute").all() and (ok.loc[~before, "target_style"] == "chuunibyou").all()
    assert (ok["sim_judged_s"] >= ok["sim_done_s"]).all()  # a group member is judged with its group
    assert (ok["generation_target"] != ok["target_style"]).any()  # generated before the switch, judged after
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["switch_seconds"] == [4]
    met = {}
    for arm in ("rm", "grpo"):
        mine = ok[ok["arm"] == arm]
        met[arm] = manifest["arms"][arm]["0"]["switch_points"]
        assert met[arm] == [int(mine.loc[mine["sim_judged_s"] >= 4, "t"].min())]
    assert met["rm"] != met["grpo"]  # each arm meets the switch at its own episode
    switches = cluster.switch_table(load_run(run_dir)).set_index("arm")
    assert switches.loc["rm", "t"] == met["rm"][0] and switches.loc["grpo", "t"] == met["grpo"][0]
    assert (switches["switch_s"] >= 4).all()
    reference = read_table(run_dir, "reference")
    assert list(reference["start_s"].unique()) == [0, 4]
    assert set(reference[reference["phase"] == 1]["target_style"]) == {"chuunibyou"}


def hand_built_run() -> RunData:
    """Two arms, two seeds, 30 episodes; arm a switches at episode 10 and judges one episode a
    second, arm b at episode 20 and judges one every two seconds; after its switch each pair earns
    0 for `zeros` episodes, then 1 (reward 1 before the switch; the reference bar is 0.9 x 1)."""
    rows, totals = [], {}
    for arm, switch, pace in (("a", 10, 1.0), ("b", 20, 2.0)):
        for seed, zeros in ((0, {"a": 3, "b": 1}[arm]), (1, 2)):
            totals.setdefault(arm, {})[str(seed)] = {"switch_points": [switch]}
            for t in range(30):
                reward = 0.0 if switch <= t < switch + zeros else 1.0
                style = "cute" if t < switch else "classical"
                rows.append(
                    {
                        "arm": arm,
                        "seed": seed,
                        "t": t,
                        "reward": reward,
                        "judge_error": None,
                        "target_style": style,
                        "sim_judged_s": t * pace,
                        "sim_done_s": t * pace,
                    }
                )
    reference = pd.DataFrame(
        [{"arm": arm, "seed": s, "phase": p, "reward": 1.0} for arm in "ab" for s in (0, 1) for p in (0, 1)]
    )
    manifest = {"budget": 30, "switch_points": [], "arms": totals}
    return RunData(Path("."), manifest, pd.DataFrame(rows), pd.DataFrame(), pd.DataFrame(), reference=reference)


def test_realignment_is_measured_from_each_pairs_own_switch_in_episodes_and_seconds():
    run = hand_built_run()
    assert run.switches == {("a", 0): [10], ("a", 1): [10], ("b", 0): [20], ("b", 1): [20]}
    table = cluster.switch_table(run).set_index(["arm", "seed"])
    assert (table["window"] == 2).all()  # a quarter of the shortest phase of any pair (10 episodes)
    # window 2, bar 0.9: the first full window of 1s after the zeros ends zeros + 2 episodes after the switch
    assert table["episodes_to_bar"].to_dict() == {("a", 0): 5, ("a", 1): 4, ("b", 0): 3, ("b", 1): 4}
    # seconds from the switch episode's judging to the bar episode's: (episodes - 1) x the pace
    assert table["seconds_to_bar"].to_dict() == {("a", 0): 4.0, ("a", 1): 3.0, ("b", 0): 4.0, ("b", 1): 6.0}
    assert table["switch_s"].to_dict() == {("a", 0): 10.0, ("a", 1): 10.0, ("b", 0): 40.0, ("b", 1): 40.0}
    pairs = cluster.paired_switches(cluster.switch_table(run)).set_index("metric")
    # a - b per seed: episodes 2 and 0, seconds 0 and -3; paired t with 1 degree of freedom (t = 12.706)
    episodes, seconds = pairs.loc["episodes_to_bar"], pairs.loc["seconds_to_bar"]
    assert (episodes["diff"], seconds["diff"]) == (1.0, -1.5)
    assert episodes["diff_lo"] == pytest.approx(1 - 12.7062, abs=1e-3)
    assert seconds["diff_hi"] == pytest.approx(-1.5 + 12.7062 * 1.5, abs=1e-3)
    assert (episodes["pairing"], seconds["verdict"]) == ("paired", "not resolved")
