"""Bars before RL, as the arms have: each SFT policy trained and each trainer warm-up (its judged
samples, then its critic steps) draws a bar per seed with its step, its values and the time left;
in this process, and from Ray tasks side by side, whose bars reach the driver's one display."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from testbed.judging.build import build_judge
from testbed.runtimes.bars import make_progress
from testbed.runtimes.loop import warm_up_job
from testbed.runtimes.starting import starting_policies
from testbed.scenario.schema import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny.yaml"
SAO = (
    "arms=[{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 24, value_pretrain_epochs: 2, "
    "value_pretrain_batch: 8}}]"
)
# a few steps of SFT per seed, checked on a few samples: the bars, not the policy, are under test
QUICK_SFT = [
    "policy.sft.steps=12",
    "policy.sft.batch_size=8",
    "policy.sft.corpus_size=200",
    "policy.sft.eval_samples=8",
    "policy.sft.per_seed=true",
    "seeds=[0, 1]",
    SAO,
]


def scenario(*overrides: str):
    return load_scenario(TINY, [*QUICK_SFT, *overrides])


def bars(progress) -> dict:
    return {(task.fields["arm"], task.fields["seed"]): task for task in progress.tasks}


def shown(progress) -> str:
    console = Console(file=io.StringIO(), width=200)
    console.print(progress)
    return console.file.getvalue()


def assert_finished(bar, unit_total: int | None, status: str) -> None:
    assert bar.completed == bar.total and (unit_total is None or bar.total == unit_total)
    assert bar.fields["status"].startswith(status), bar.fields


def test_sft_and_a_warm_up_draw_a_bar_per_seed_in_this_process(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path))
    run = scenario()
    progress = make_progress()
    starts = starting_policies(run, log=lambda message: None, progress=progress)
    for seed in (0, 1):  # a check that passes early ends a bar there: total <= 12
        assert_finished(bars(progress)[("SFT", seed)], None, "loss ")
        assert 0 < bars(progress)[("SFT", seed)].total <= 12

    def warm_up(progress) -> None:
        warm_up_job(
            run,
            run.arms[0],
            0,
            base_policy=starts[0].policy,
            tokenizer=starts[0].tokenizer,
            judge=build_judge(run),
            schedule=run.schedule_object(),
            policy_key=starts[0].key,
            log=lambda message: None,
            progress=progress,
        )

    warm_up(progress)
    assert_finished(bars(progress)[("sao samples", 0)], 24, "quality ")
    assert_finished(bars(progress)[("sao warm-up", 0)], 6, "epoch 2  value loss ")  # 3 batches x 2 epochs
    text = shown(progress)
    assert all(
        part in text
        for part in ("sao warm-up seed 0", "step     6/6", "epoch 2  value loss", "sample    24/24", "quality")
    )

    again = make_progress()  # all cached now: nothing runs, no bar
    starting_policies(run, log=lambda message: None, progress=again)
    warm_up(again)
    assert again.tasks == []


def test_side_by_side_tasks_bring_their_bars_to_the_drivers_display(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from testbed.runtimes.dispatch import resolved_dict
    from testbed.runtimes.ray.parallel import ProgressBoard, gather, warm_up_task, worker_settings

    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path))
    run = scenario("runtime.parallel_arms=true")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        progress = make_progress()
        starts = starting_policies(run, log=lambda message: None, progress=progress)  # SFT: one task per seed
        board = ProgressBoard.remote()
        policy = (starts[1].policy.config, starts[1].policy.state_dict())
        gather(
            [
                warm_up_task.remote(
                    resolved_dict(run),
                    "sao",
                    1,
                    policy,
                    starts[1].tokenizer,
                    starts[1].key,
                    worker_settings(run),
                    board,
                )
            ],
            board,
            progress,
            {},
        )
    finally:
        ray.shutdown()
    for seed in (0, 1):
        assert_finished(bars(progress)[("SFT", seed)], None, "loss ")
    assert_finished(bars(progress)[("sao samples", 1)], 24, "quality ")
    assert_finished(bars(progress)[("sao warm-up", 1)], 6, "epoch 2  value loss ")
    assert sorted(bars(progress)) == [("SFT", 0), ("SFT", 1), ("sao samples", 1), ("sao warm-up", 1)]
