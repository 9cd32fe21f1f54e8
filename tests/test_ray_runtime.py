"""The Ray runtime through the real CLI entry point on a real local Ray cluster (2 CPUs): an async
run completes with a contiguous clock; with one rollout actor and max_staleness 0 it writes the
synchronous runtime's rows; a rollout actor killed mid-run is restarted and nothing is lost or
counted twice; a lost learner stops the run with a checkpoint that --resume continues."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from testbed.cli.run_command import main  # noqa: E402
from testbed.runtimes.ray.cluster import start_local  # noqa: E402
from testbed.store import RunStore, read_table  # noqa: E402
from tests.tracker_readers import check, tensorboard_scalars  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
ARMS = (
    "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
    "{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 64, value_warmup_updates: 1}}]"
)
BASE = [
    "--set",
    "seeds=[0]",
    "--set",
    "budget.episodes=96",
    "--set",
    ARMS,
    "--set",
    "runtime.torch_threads=1",
    "--set",
    "eval.every=48",
    "--no-report",  # rows are compared, not reports
]
# One arm where the test is about one arm's actors (a kill, a histogram): each arm starts its own.
RM_ONLY = ["--set", "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}]"]
SAO_ONLY = [
    "--set",
    "arms=[{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 64, value_warmup_updates: 1}}]",
]
ROWS = [
    "arm",
    "seed",
    "t",
    "prompt_id",
    "target_style",
    "judged_style",
    "reward",
    "policy_version",
    "staleness",
    "response",
]


@pytest.fixture(scope="module")
def local_ray():
    """One local cluster for the module: each run makes and kills its own named actors, and a
    cluster's start costs seconds of both cores."""
    start_local(num_cpus=2, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def run(tmp_path: Path, name: str, *extra: str) -> tuple[int, Path]:
    code = main([SCENARIO, "--out", str(tmp_path), "--run-name", name, *BASE, *extra])
    return code, tmp_path / name


def judged(run_dir: Path) -> pd.DataFrame:
    episodes = read_table(run_dir, "episodes")
    return episodes[episodes["judge_error"].isna()].sort_values(["arm", "t"]).reset_index(drop=True)


def assert_clock_contiguous(run_dir: Path, budget: int = 96) -> pd.DataFrame:
    episodes = judged(run_dir)
    for arm, rows in episodes.groupby("arm"):
        assert rows["t"].tolist() == list(range(budget)), f"{arm}: clock values missing or duplicated"
    return episodes


def test_one_actor_on_policy_writes_the_synchronous_rows(tmp_path, local_ray, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code_sync, sync_dir = run(tmp_path, "sync")
    code_ray, ray_dir = run(tmp_path, "ray", "--runtime", "ray", "--set", "runtime.max_staleness=0")
    assert code_sync == code_ray == 0
    pd.testing.assert_frame_equal(judged(ray_dir)[ROWS], judged(sync_dir)[ROWS])
    updates = [
        read_table(d, "updates").sort_values(["arm", "update"]).reset_index(drop=True) for d in (sync_dir, ray_dir)
    ]
    pd.testing.assert_series_equal(updates[0]["policy_loss"], updates[1]["policy_loss"], rtol=1e-6)
    evals = [
        read_table(d, "evals").sort_values(["arm", "t", "style"]).reset_index(drop=True) for d in (sync_dir, ray_dir)
    ]
    pd.testing.assert_series_equal(evals[0]["share"], evals[1]["share"])


def test_expert_ids_travel_through_the_rollout_actors(tmp_path, local_ray, monkeypatch, shared_cache):
    """Routing noise in the actors' engine, r3 in the learner: every episode's expert ids cross from
    the actor to the learner (r3 refuses an episode without them) and the learner's probe measures
    their mismatch. (The noise stream is the engine's own, drawn in another order than in the
    synchronous runtime, whose reference evaluation shares the engine: the rows are not compared.)"""
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code, run_dir = run(
        tmp_path,
        "ray",
        "--runtime",
        "ray",
        "--set",
        "runtime.max_staleness=1",
        "--set",
        "engine={type: hf, mismatch: true, args: {router_noise: 0.05}}",
        "--set",
        "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16, routing_replay: r3}}]",
    )
    assert code == 0
    assert_clock_contiguous(run_dir)
    updates = read_table(run_dir, "updates")
    measured = updates[updates["mismatch_tokens"] > 0]
    assert len(measured) > 0 and (measured["mismatch_expert_diff"] > 0).all()


def test_async_run_with_two_actors_trains_on_stale_rollouts(tmp_path, local_ray, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    code, run_dir = run(
        tmp_path,
        "async",
        "--runtime",
        "ray",
        "--set",
        "runtime.rollout_workers=2",
        "--set",
        "runtime.max_staleness=2",
        *SAO_ONLY,
    )
    assert code == 0
    episodes = assert_clock_contiguous(run_dir)
    assert {"generation_target", "generation_t", "staleness"} <= set(episodes.columns)
    updates = read_table(run_dir, "updates")
    assert updates["staleness_max"].max() <= 2
    assert updates["staleness_max"].max() >= 1  # two actors ahead of the learner: some rollouts are off-policy
    import json

    runtime = json.loads((run_dir / "manifest.json").read_text())["arms"]["sao"]["0"]["runtime"]
    assert (
        runtime["rollout_workers"] == 2
        and sum(runtime["staleness_histogram"].values()) == len(updates[updates.arm == "sao"]) * 16
    )
    # Each episode's row carries the staleness it was trained at (not the lag when judged).
    trained = episodes[(episodes.arm == "sao") & episodes.trained.astype(bool)]
    assert {str(k): v for k, v in trained["staleness"].astype(int).value_counts().items()} == runtime[
        "staleness_histogram"
    ]
    untrained = episodes[~episodes.trained.astype(bool)]  # dropped as too stale (staleness known) or left over
    assert untrained["staleness"].notna().sum() == len(read_table(run_dir, "dropped"))


def test_a_killed_rollout_actor_is_restarted_and_nothing_is_lost(tmp_path, local_ray, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    killed: list[str] = []

    def kill_first_rollout_actor() -> None:
        deadline = time.time() + 240
        while time.time() < deadline and not killed:
            for name in ray.util.list_named_actors():
                if "-rm-seed0-rollout0-r0" in name:
                    time.sleep(1.0)  # let it generate a round or two first
                    ray.kill(ray.get_actor(name), no_restart=True)
                    killed.append(name)
                    return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_first_rollout_actor, daemon=True)
    killer.start()
    code, run_dir = run(
        tmp_path,
        "faults",
        "--runtime",
        "ray",
        "--set",
        "runtime.max_staleness=1",
        *RM_ONLY,
    )
    killer.join(timeout=5)
    assert code == 0 and killed
    episodes = assert_clock_contiguous(run_dir)
    assert not episodes.duplicated(["arm", "t"]).any()
    import json

    runtime = json.loads((run_dir / "manifest.json").read_text())["arms"]["rm"]["0"]["runtime"]
    assert runtime["actor_restarts"] >= 1


def test_parallel_arms_write_the_rows_of_running_them_one_after_another(tmp_path, local_ray, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    grpo = "arms.1={name: grpo, type: grpo, args: {group_size: 4, episodes_per_update: 16}}"
    code_seq, seq_dir = run(tmp_path, "sequential", "--set", grpo)
    code_par, par_dir = run(tmp_path, "parallel", "--set", grpo, "--set", "runtime.parallel_arms=true")
    assert code_seq == code_par == 0
    key = ["arm", "seed", "t"]
    seq, par = (judged(d).sort_values(key).reset_index(drop=True)[ROWS] for d in (seq_dir, par_dir))
    pd.testing.assert_frame_equal(par, seq)
    assert len(seq.groupby(["arm", "seed"])) == 2  # two tasks side by side
    for table in ("updates", "evals"):
        assert len(read_table(par_dir, table)) == len(read_table(seq_dir, table))


def test_parallel_arms_on_the_simulated_cluster_run_side_by_side_and_write_the_same_rows(
    tmp_path, local_ray, monkeypatch, shared_cache, capfd
):
    # The simulated cluster is one process per arm x seed (no actors), so its arms run as tasks too.
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    simulated = [
        "--set",
        "budget.episodes=48",  # three updates of 16: enough for staleness, and cheap twice
        "--set",
        "eval.every=48",
        "--set",
        "runtime.kind=simulated",
        "--set",
        "runtime.max_staleness=2",
        "--set",
        "runtime.simulation={rollout_slots: 16, staleness_policy: drop, latency: {per_token_s: 0.05, spread: 0.8}, "
        "learner: {fixed_s: 0.2, per_token_s: 0.0005, sync_s: 0.1}}",
        "--set",
        "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
        "{name: grpo, type: grpo, args: {group_size: 4, episodes_per_update: 16}}]",
    ]
    code_seq, seq_dir = run(tmp_path, "sim_sequential", *simulated)
    capfd.readouterr()
    code_par, par_dir = run(tmp_path, "sim_parallel", *simulated, "--set", "runtime.parallel_arms=true")
    assert code_seq == code_par == 0
    columns = ["arm", "seed", "t", "prompt_id", "reward", "policy_version", "staleness", "response", "sim_done_s"]
    seq, par = (judged(d).sort_values(["arm", "t"]).reset_index(drop=True)[columns] for d in (seq_dir, par_dir))
    pd.testing.assert_frame_equal(par, seq)
    assert (seq["staleness"] > 0).any()  # the cluster really ran asynchronously
    assert "running 2 arm x seed tasks side by side on Ray" in capfd.readouterr().out


def test_with_parallel_arms_an_asynchronous_arm_runs_after_the_synchronous_ones(
    tmp_path, local_ray, monkeypatch, shared_cache
):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    arms = (
        "arms=[{name: rm, type: running_mean, args: {window: 32, episodes_per_update: 16}}, "
        "{name: rm16, type: running_mean, args: {window: 16, episodes_per_update: 16}}, "
        "{name: rm_async, type: running_mean, args: {window: 32, episodes_per_update: 16}, "
        "runtime: {kind: ray, rollout_workers: 2, max_staleness: 1}}]"
    )
    tracked = ["--track", "tensorboard", "--set", "tracking.flush_seconds=0.2", "--set", "tracking.rolling_every=16"]
    code, run_dir = run(tmp_path, "mixed", "--set", arms, "--set", "runtime.parallel_arms=true", *tracked)
    assert code == 0  # the async arm's actors find cores: it does not wait behind a task holding them
    episodes = assert_clock_contiguous_per_seed(run_dir)
    assert set(episodes["arm"]) == {"rm", "rm16", "rm_async"}
    assert (episodes[episodes["arm"] == "rm_async"]["staleness"].dropna() > 0).any()  # it really ran asynchronously
    # the trackers (the driver's): each task's rows through the relay, once; the Ray runtime's from the driver
    for arm in ("rm", "rm16", "rm_async"):
        check(tensorboard_scalars(run_dir / "tb" / f"{arm}-seed0"), run_dir, f"tensorboard {arm}", 16, (arm, 0))


def assert_clock_contiguous_per_seed(run_dir: Path, budget: int = 96) -> pd.DataFrame:
    episodes = judged(run_dir)
    for (arm, seed), rows in episodes.groupby(["arm", "seed"]):
        assert sorted(rows["t"]) == list(range(budget)), f"{arm} seed {seed}: clock values missing or duplicated"
    return episodes


def test_parallel_arms_pretrain_each_critic_once_as_one_after_another_does(
    tmp_path, local_ray, monkeypatch, shared_cache
):
    # Two cold critic caches (the SFT policy copied in): one after another, seed 0 pretrains the
    # critic and seed 1 loads it; side by side must do the same, not pretrain one per seed.
    import shutil

    caches = []
    for name in ("cold_seq", "cold_par"):
        cache = tmp_path / name
        cache.mkdir()
        for policy in shared_cache.glob("policy-*"):
            if not policy.name.count(".tmp"):
                shutil.copytree(policy, cache / policy.name)
        caches.append(cache)
    sao = (
        "arms=[{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 48, value_pretrain_epochs: 1, "
        "value_warmup_updates: 1}}]"
    )
    monkeypatch.setenv("TESTBED_CACHE", str(caches[0]))
    code_seq, seq_dir = run(tmp_path, "sao_seq", "--set", sao, "--set", "seeds=[0, 1]")
    monkeypatch.setenv("TESTBED_CACHE", str(caches[1]))
    code_par, par_dir = run(
        tmp_path, "sao_par", "--set", sao, "--set", "seeds=[0, 1]", "--set", "runtime.parallel_arms=true"
    )
    assert code_seq == code_par == 0
    assert len(list(caches[1].glob("critic-*.pt"))) == 1
    key = ["arm", "seed", "t"]
    seq, par = (judged(d).sort_values(key).reset_index(drop=True)[ROWS] for d in (seq_dir, par_dir))
    pd.testing.assert_frame_equal(par, seq)


def test_parallel_tasks_progress_reaches_the_drivers_bars(local_ray):
    from testbed.runtimes.loop import make_progress
    from testbed.runtimes.ray.parallel import ProgressBoard, RemoteProgress, draw

    @ray.remote
    def task(board) -> None:  # what an arm x seed task does with its bar
        bar = RemoteProgress(board, every_s=3600.0)  # throttled: only add_task and flush post
        bar.add_task("", total=50, completed=0, arm="rm", seed=3, target="cute", reward="  -  ")
        for clock in range(1, 51):
            bar.update(0, completed=clock, target="classical", reward="0.75")
        bar.flush()

    board = ProgressBoard.remote()
    progress, bars = make_progress(), {}
    ray.get(task.remote(board))
    draw(progress, bars, ray.get(board.read.remote()))
    (shown,) = progress.tasks
    assert (shown.total, shown.completed) == (50, 50)
    assert shown.fields == {"arm": "rm", "seed": 3, "target": "classical", "reward": "0.75"}
    draw(progress, bars, ray.get(board.read.remote()))  # drawing again updates the same bar
    assert len(progress.tasks) == 1


def test_row_relay_hands_a_tasks_rows_to_the_drivers_sinks_in_order(local_ray, tmp_path):
    from testbed.runtimes.ray.row_relay import RelayedRows, RowRelay, forward

    sent = [("episodes", [{"t": t, "reward": t / 10}]) for t in range(5)] + [("updates", [{"update": 1, "t": 4}])]

    @ray.remote
    def task(relay) -> None:  # what a parallel arm's store does with its rows
        relayed = RelayedRows(relay, every_s=0.0)  # posts at every append, without waiting ...
        for table, rows in sent:
            relayed.append(table, rows)
        relayed.flush()  # ... and waits for the last post before the task returns

    class Sink:  # the driver's trackers, as the store's sinks see them
        def __init__(self) -> None:
            self.got: list[tuple[str, list[dict]]] = []

        def append(self, table: str, rows: list[dict]) -> None:
            self.got.append((table, rows))

    relay, store = RowRelay.remote(), RunStore(tmp_path)
    store.sinks.append(Sink())
    ray.get(task.remote(relay))
    forward(relay, store)
    assert store.sinks[0].got == sent
    forward(relay, store)  # taken once: nothing twice
    assert len(store.sinks[0].got) == len(sent)


def test_a_lost_learner_stops_with_a_checkpoint_and_resume_finishes(tmp_path, local_ray, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    killed: list[str] = []

    def kill_learner_after_some_updates() -> None:
        deadline = time.time() + 240
        while time.time() < deadline and not killed:
            updates = tmp_path / "learner" / "checkpoints" / "rm-seed0"
            names = [n for n in ray.util.list_named_actors() if n.endswith("-rm-seed0-learner0")]
            if names and updates.is_dir() and any(p.name.startswith("u") for p in updates.iterdir()):
                ray.kill(ray.get_actor(names[0]), no_restart=True)
                killed.append(names[0])
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_learner_after_some_updates, daemon=True)
    killer.start()
    code, run_dir = run(
        tmp_path,
        "learner",
        "--runtime",
        "ray",
        "--set",
        "reliability.checkpoint_every=2",
        *RM_ONLY,
    )
    killer.join(timeout=5)
    assert killed and code == 3
    import json

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and "the learner failed" in manifest["stop_reason"]
    assert main(["--resume", str(run_dir)]) == 0
    assert_clock_contiguous(run_dir)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "done"
