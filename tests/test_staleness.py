"""One staleness knob, `runtime.max_staleness`, applied at dequeue by whichever runtime runs the arm
(the Ray runtime's drops are tested in tests/test_ray_runtime.py): unset, the synchronous loop
trains every episode and the Ray runtime stays on-policy; SAO's old `staleness_bound` is refused
with the new spelling."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cli.run_command import main
from testbed.runtimes.learn import take_batch
from testbed.scenario.loading import ScenarioError
from testbed.scenario.schema import RuntimeConfig, load_scenario
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests/data/golden.yaml")


def episodes(*versions):
    return [SimpleNamespace(t=i, policy_version=v) for i, v in enumerate(versions)]


def test_take_batch_drops_the_stale_and_keeps_the_order():
    queue = episodes(0, 2, 1, 2, 2, 0)
    batch, dropped = take_batch(queue, 3, version=2, max_staleness=0)
    assert [e.t for e in batch] == [1, 3, 4] and [e.t for e in dropped] == [0, 2]
    assert [e.t for e in queue] == [5]  # not reached yet: not judged stale yet


def test_take_batch_short_of_a_batch_puts_the_fresh_back():
    queue = episodes(0, 3, 3)
    batch, dropped = take_batch(queue, 3, version=3, max_staleness=1)
    assert batch is None and [e.t for e in dropped] == [0] and [e.t for e in queue] == [1, 2]


def test_take_batch_without_a_bound_takes_the_head():
    queue = episodes(0, 5, 9, 9)
    batch, dropped = take_batch(queue, 3, version=9, max_staleness=None)
    assert [e.t for e in batch] == [0, 1, 2] and dropped == [] and [e.t for e in queue] == [3]


def test_unset_max_staleness_is_on_policy_on_ray_and_unbounded_on_sync():
    assert RuntimeConfig(kind="ray").staleness_limit() == 0
    assert RuntimeConfig(kind="sync").staleness_limit() is None
    assert RuntimeConfig(kind="sync", max_staleness=2).staleness_limit() == 2
    assert RuntimeConfig(kind="ray", max_staleness=3).staleness_limit() == 3


@pytest.mark.parametrize("value", [0, 3])
def test_staleness_bound_is_refused_with_the_runtime_spelling(value):
    arms = f"arms=[{{name: sao, type: sao, args: {{episodes_per_update: 16, staleness_bound: {value}}}}}]"
    with pytest.raises(ScenarioError) as info:
        load_scenario(SCENARIO, [arms])
    said = str(info.value)
    assert f"arms.0.args: staleness_bound: {value} is now runtime.max_staleness: {value}" in said
    assert f"its runtime: {{max_staleness: {value}}}" in said


class EverySeventhFails:
    """The rubric judge, with every 7th call of this process failing: rounds come back short, so
    the synchronous loop's queue keeps episodes of an older version."""

    def __init__(self):
        from judges.rubric import RubricJudge

        self.inner, self.calls = RubricJudge(), 0

    async def judge(self, requests):
        from testbed.types import Verdict

        out = []
        for verdict in await self.inner.judge(requests):
            self.calls += 1
            out.append(Verdict.failed("503 service unavailable") if self.calls % 7 == 0 else verdict)
        return out


def test_sync_loop_drops_what_max_staleness_bounds_and_keeps_the_rest(tmp_path):
    arms = (
        "arms=[{name: free, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
        "{name: bound, type: running_mean, args: {window: 32, episodes_per_update: 16}, runtime: {max_staleness: 0}}]"
    )
    code = main(
        [
            SCENARIO,
            "--set",
            f"policy.checkpoint={ROOT / 'tests/data/golden/policy'}",
            "--set",
            arms,
            "--set",
            "judge={type: 'tests.test_staleness:EverySeventhFails'}",
            "--set",
            "eval.reference_samples=0",
            "--out",
            str(tmp_path),
            "--run-name",
            "stale",
            "--no-report",
        ]
    )
    assert code == 0
    run_dir = tmp_path / "stale"
    rows = read_table(run_dir, "episodes")
    judged = rows[rows["judge_error"].isna()]
    trained = judged[judged["trained"].astype(bool)]
    dropped = read_table(run_dir, "dropped")
    totals = json.loads((run_dir / "manifest.json").read_text())["arms"]
    updates = read_table(run_dir, "updates")

    # unset: every judged episode of a full batch is trained, some a version late (the sync loop as before)
    free = trained[trained["arm"] == "free"]
    assert (free["staleness"] > 0).any() and totals["free"]["0"]["dropped_stale"] == 0
    assert dropped.empty or not (dropped["arm"] == "free").any()
    assert updates[updates["arm"] == "free"]["dropped_stale_total"].isna().all()  # no bound, no drop count

    # max_staleness 0: trained on-policy only; the older ones are stored untrained, in `dropped` and counted
    bound = trained[trained["arm"] == "bound"]
    mine = dropped[dropped["arm"] == "bound"]
    assert len(bound) > 0 and (bound["staleness"] == 0).all()
    assert len(mine) > 0 and (mine["staleness"] > 0).all()
    untrained = judged[(judged["arm"] == "bound") & ~judged["trained"].astype(bool) & judged["staleness"].notna()]
    assert sorted(untrained["t"]) == sorted(mine["t"])
    assert totals["bound"]["0"]["dropped_stale"] == len(mine)
    assert updates[updates["arm"] == "bound"]["dropped_stale_total"].iloc[-1] <= len(mine)
