"""Judge drift as schedules: `judge_at(t)` beside `target(t)` (testbed/envs/schedules/judge_drift.py),
the scenario's named judges behind one JudgePanel, the reference re-judged per phase, and the
report treating every judge change as a switch. The unit tests build the pieces by hand; the
tiny runs take each shipped judge-drift scenario through the real CLI at a tiny size."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.envs.schedules import JudgeChange, JudgeDriftSchedule, Phase, PiecewiseSchedule
from testbed.envs.schedules.judge_drift import judge_drift
from testbed.envs.schedules.loading import check_schedule
from testbed.envs.style_shift import StyleShiftEnv
from testbed.judging.panel import JudgePanel
from testbed.runtimes.reference_policy import settled_judges
from testbed.scenario.schema import ScenarioError, parse_scenario
from testbed.types import JudgeRequest, Verdict
from testbed.world import STYLES, prompts

ROOT = Path(__file__).resolve().parent.parent
ARCHETYPES = ("academic", "cute", "chuunibyou", "classical")
CUTE = PiecewiseSchedule([Phase("cute", 0, 100, ("cute", "academic"))])


class Named:
    """A judge that answers with its own name as the style, and remembers what it was asked."""

    def __init__(self, name: str) -> None:
        self.name, self.asked = name, []

    async def judge(self, requests):
        self.asked.append([r.response for r in requests])
        return [Verdict(1, 1, self.name) for _ in requests]


def test_a_step_and_a_blend_change_the_judge_where_the_schedule_says():
    schedule = JudgeDriftSchedule(
        CUTE, [JudgeChange("default", 0), JudgeChange("v2", 30), JudgeChange("v3", 70, window=20)], seed=4
    )
    assert schedule.switch_points() == [30, 70] and schedule.windows() == [(60, 80)]
    assert [schedule.judge_at(t) for t in (0, 29, 30, 59, 80, 99)] == ["default", "default", "v2", "v2", "v3", "v3"]
    inside = [schedule.judge_at(t) for t in range(60, 80)]
    assert set(inside) == {"v2", "v3"}  # a blend: both judges score inside the window
    # the chance of the new judge rises through the window: fewer v3 in its first half than in its second
    assert inside[:10].count("v3") < inside[10:].count("v3")
    assert [schedule.judge_at(t) for t in range(60, 80)] == inside  # pure in t
    assert schedule.target(75).style == "cute"
    check_schedule(schedule, 100, STYLES, ["default", "v2", "v3"])


def test_target_switches_and_judge_changes_are_one_list_of_switches():
    targets = PiecewiseSchedule(
        [Phase("cute", 0, 40, ("cute", "academic")), Phase("academic", 40, 100, ("cute", "academic"))]
    )
    schedule = JudgeDriftSchedule(targets, [JudgeChange("default", 0), JudgeChange("v2", 70)])
    assert schedule.switch_points() == [40, 70]
    check_schedule(schedule, 100, STYLES, ["default", "v2"])
    assert schedule.judge_changes() == [{"t": 70, "from_judge": "default", "to_judge": "v2", "window": [70, 70]}]


@pytest.mark.parametrize(
    ("judges", "message"),
    [
        ([{"judge": "v2", "start": 0.0}, {"judge": "v2", "start": 0.5}], "the judge already in force"),
        ([{"judge": "default", "start": 0.1}, {"judge": "v2", "start": 0.5}], "must start at 0.0"),
        (
            [{"judge": "default", "start": 0.0}, {"judge": "v2", "start": 0.5}, {"judge": "v3", "start": 0.4}],
            "not after",
        ),
    ],
)
def test_judge_changes_in_the_wrong_order_are_refused(judges, message):
    with pytest.raises(ValueError, match=message):
        judge_drift(budget=100, archetypes=ARCHETYPES, style="cute", judges=judges)


def test_overlapping_blends_are_refused_with_the_change_named():
    with pytest.raises(ValueError, match=r"judge change 2 \(v3 at 60\): its window \[40, 80\) starts before"):
        judge_drift(
            budget=100,
            archetypes=ARCHETYPES,
            style="cute",
            judges=[
                {"judge": "default", "start": 0.0},
                {"judge": "v2", "start": 0.5, "window": 0.2},
                {"judge": "v3", "start": 0.6, "window": 0.4},
            ],
        )


def scenario_with(judges: dict, changes: list[dict], **more) -> dict:
    return {
        "name": "jd",
        "judges": judges,
        "schedule": {"type": "judge_drift", "args": {"style": "cute", "judges": changes, **more}},
        "arms": [{"name": "rm", "type": "running_mean"}],
        "budget": {"episodes": 100},
    }


def test_a_scenario_names_a_judge_the_schedule_lacks_or_never_uses():
    step = [{"judge": "default", "start": 0.0}, {"judge": "v2", "start": 0.5}]
    parse_scenario(scenario_with({"v2": {"type": "rubric", "args": {"dominance": 0.8}}}, step))
    with pytest.raises(ScenarioError, match=r"judge_at\(50\) is 'v2', not one of the scenario's judges \(default\)"):
        parse_scenario(scenario_with({}, step))
    with pytest.raises(ScenarioError, match="judges: unused never score"):
        parse_scenario(scenario_with({"v2": {"type": "rubric"}, "unused": {"type": "rubric"}}, step))
    with pytest.raises(ScenarioError, match="judges.v2.args.dominanse"):
        parse_scenario(scenario_with({"v2": {"type": "open_world", "args": {"dominanse": 0.8}}}, step))
    with pytest.raises(ScenarioError, match="not 'default'"):
        parse_scenario(scenario_with({"default": {"type": "rubric"}}, step))
    # a target schedule inside, its fields named where they sit
    inner = {"type": "piecewise", "args": {"phases": [{"style": "cute", "start": 0.0, "end": 0.9}]}}
    data = scenario_with({"v2": {"type": "rubric"}}, step)
    data["schedule"]["args"] = {"targets": inner, "judges": step}
    with pytest.raises(ScenarioError, match="must end at 1.0"):
        parse_scenario(data)


def test_the_panel_sends_each_request_to_its_judge_in_order_and_counts_them():
    a, b = Named("default"), Named("v2")
    panel = JudgePanel({"default": a, "v2": b})
    requests = [
        JudgeRequest("p", f"r{i}", "cute", ("cute",), judge=j) for i, j in enumerate([None, "v2", "default", "v2"])
    ]
    verdicts = asyncio.run(panel.judge(requests))
    assert [v.style for v in verdicts] == ["default", "v2", "default", "v2"]
    assert a.asked == [["r0", "r2"]] and b.asked == [["r1", "r3"]]  # one call per judge per batch
    assert panel.calls_by_judge() == {"default": 2, "v2": 2}
    with pytest.raises(ValueError, match="names judge 'v9'"):
        asyncio.run(panel.judge([JudgeRequest("p", "r", "cute", ("cute",), judge="v9")]))


def test_the_env_asks_the_judge_in_force_at_each_clock_and_refuses_a_judge_that_cannot_route():
    schedule = JudgeDriftSchedule(CUTE, [JudgeChange("default", 0), JudgeChange("v2", 3)])
    a, b = Named("default"), Named("v2")
    env = StyleShiftEnv(JudgePanel({"default": a, "v2": b}), schedule, prompts("train")[:8], seed=0)
    env.reset(seed=0)
    starts = env.reset_batch(5)
    verdicts = env.step_batch(starts, [f"r{i}" for i in range(5)])
    assert [v.style for v in verdicts] == ["default"] * 3 + ["v2"] * 2
    assert env.clock == 5 and [s.judge for s in starts] == ["default"] * 3 + ["v2"] * 2
    evals = env.eval_starts(prompts("heldout")[:2], 4)
    assert [v.style for v in env.evaluate_batch(evals, ["x", "y"])] == ["v2", "v2"]
    lone = StyleShiftEnv(Named("default"), schedule, prompts("train")[:8], seed=0)
    with pytest.raises(ValueError, match=r"asks for judge\(s\) \['v2'\]"):
        lone.evaluate_batch(lone.eval_starts(prompts("heldout")[:1], 4), ["x"])
    env.close()
    lone.close()


def test_the_reference_after_a_blend_is_judged_by_the_new_judge():
    schedule = JudgeDriftSchedule(CUTE, [JudgeChange("default", 0), JudgeChange("v2", 50, window=40)], seed=1)
    assert settled_judges(schedule, schedule.switch_points(), 100) == ["default", "v2"]
    assert settled_judges(CUTE, [], 100) == [None]  # a schedule that keeps its judge: the env's choice


# ----------------------------------------------------------------------------------------------
# the shipped scenarios, each at a tiny size through the real CLI


TINY = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
ARM = {"name": "running_mean", "type": "running_mean", "args": {"window": 32, "episodes_per_update": 16}}


def tiny_version(name: str, tmp_path: Path, arms: list[dict] | None = None) -> Path:
    """scenarios/NAME.yaml with tiny.yaml's policy, sampling and sizes; its judges and schedule as shipped."""
    data = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    data.update(
        policy=TINY["policy"],
        sampling=TINY["sampling"],
        arms=arms or [ARM],
        seeds=[0],
        budget={"episodes": 160},
        eval={"every": 64, "prompts": 16, "reference_samples": 1},
        runtime={"parallel_arms": False},
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_tiny(name: str, tmp_path: Path, shared_cache: Path, monkeypatch, arms: list[dict] | None = None) -> Path:
    from analysis.report import report
    from testbed.cli.run_command import main

    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    out = tmp_path / "runs"
    assert main([str(tiny_version(name, tmp_path, arms)), "--out", str(out), "--no-report"]) == 0
    (run_dir,) = out.iterdir()
    report(run_dir, figures=False)
    return run_dir


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("judge_switch", [(80, "cute", "default", "open")]),
        ("judge_bar", [(53, "chuunibyou", "default", "repetition"), (107, "chuunibyou", "repetition", "strict")]),
        ("judge_blend", [(80, "cute", "default", "open")]),
    ],
)
def test_each_kind_of_judge_change_is_a_switch_in_the_report(name, changes, tmp_path, shared_cache, monkeypatch):
    from testbed.scenario.schema import load_scenario
    from testbed.store import read_table

    run_dir = run_tiny(name, tmp_path, shared_cache, monkeypatch)
    schedule = load_scenario(run_dir / "scenario.yaml").schedule_object()
    episodes = read_table(run_dir, "episodes")
    # every episode was scored by the judge the schedule had in force at its clock
    assert (episodes["judge"] == episodes["t"].map(schedule.judge_at)).all()
    switches = pd.read_csv(run_dir / "switches_by_seed.csv")
    got = [(r.t, r.to_style, r.from_judge, r.to_judge) for r in switches.itertuples()]
    assert got == changes
    assert switches["from_style"].tolist() == switches["to_style"].tolist()  # the target stayed
    # the common bar of each switch: the reference policy judged by the new phase's judge
    reference = read_table(run_dir, "reference").sort_values("phase")
    assert reference["judge"].tolist() == [changes[0][2], *(c[3] for c in changes)]
    assert (switches["bar_source"] == "reference").all()
    assert switches["old_half_life"].isna().all()  # no old style to fade when only the judge changed
    summary = (run_dir / "summary.md").read_text()
    for t, style, old, new in changes:
        assert f"{style}, judge {old} -> {new} @ {t}" in summary
    # judge calls per judge: the training episodes each scored, beside the held-out evaluations
    totals = json.loads((run_dir / "manifest.json").read_text())["arms"]["running_mean"]["0"]["judge"]
    per_judge = {k.removeprefix("judge_calls_"): v for k, v in totals.items() if k.startswith("judge_calls_")}
    assert set(per_judge) == {"default", *(c[3] for c in changes)}
    evals = read_table(run_dir, "evals").drop_duplicates(["t"])
    for judge, calls in per_judge.items():
        trained = int((episodes["judge"] == judge).sum())
        evaluated = 16 * int((evals["judge"] == judge).sum())
        assert calls == trained + evaluated, judge


def test_the_template_upgrade_is_compared_with_the_target_change_arm_by_arm(tmp_path, shared_cache, monkeypatch):
    grpo = {"name": "grpo", "type": "grpo", "args": {"group_size": 4, "episodes_per_update": 16}}
    run_dir = run_tiny("judge_template_upgrade", tmp_path, shared_cache, monkeypatch, arms=[ARM, grpo])
    switches = pd.read_csv(run_dir / "switches_by_seed.csv")
    kinds = switches.drop_duplicates("switch")[["switch", "t", "from_style", "to_style", "from_judge", "to_judge"]]
    assert kinds.values.tolist() == [
        [1, 64, "cute", "chuunibyou", "default", "default"],
        [2, 112, "chuunibyou", "chuunibyou", "default", "v2"],
    ]
    assert set(switches["arm"]) == {"running_mean", "grpo"}
    paired = pd.read_csv(run_dir / "paired.csv")
    tasks = set(paired[paired["unit"] == "switch"]["task"].astype(str))
    assert {"1", "2"} <= tasks  # both switches, arm against arm (and "all": pooled)
