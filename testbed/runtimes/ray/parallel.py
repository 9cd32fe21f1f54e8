"""Arms x seeds side by side: each runs as its own Ray task (`runtime.parallel_arms: true`).

A task runs one arm x seed exactly as it would run alone (the synchronous loop, or the Ray
runtime's actors), into a private store in its own scratch directory, and hands the finished
tables back through Ray's object store; the driver alone writes the run directory. So the rows
are those of running the arms one after another, and no task needs the driver's disk.

The unit of durability is one arm x seed: a finished one is in the run directory and the
manifest; one interrupted mid-way starts again from its beginning on `--resume`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from testbed.cpu_numerics import configure_torch
from testbed.device import gpus
from testbed.judging.build import build_judge
from testbed.models.sft import cache_root, is_cached, load_or_train_policy
from testbed.paths import cache_dir
from testbed.runtimes.bars import StepBar, make_progress
from testbed.runtimes.dispatch import resolved_dict, runner_for
from testbed.runtimes.loop import first_jobs, warm_up_job
from testbed.runtimes.ray.rollout import build_policy
from testbed.runtimes.ray.row_relay import RelayedRows, RowRelay, forward
from testbed.runtimes.sft_check import sft_evaluator
from testbed.scenario.schema import PolicyConfig, parse_scenario
from testbed.store import TABLES, RunStore, read_table


@ray.remote(num_cpus=0)
class ProgressBoard:
    """Where the tasks post their progress bars' state, for the driver to draw: (name, seed) ->
    the fields of `rich.progress.Progress.update` (name: an arm, "SFT", an arm's warm-up)."""

    def __init__(self) -> None:
        self.bars: dict[tuple[str, Any], dict[str, Any]] = {}

    def post(self, posts: dict[tuple[str, Any], dict[str, Any]]) -> None:
        for key, fields in posts.items():
            self.bars.setdefault(key, {}).update(fields)

    def read(self) -> dict[tuple[str, Any], dict[str, Any]]:
        return self.bars


class RemoteProgress:
    """The two `rich.progress.Progress` calls a task's bars make (its arm's, its warm-up's, its
    SFT's), forwarded to a ProgressBoard under each bar's (arm, seed) fields, at most every
    `every_s` seconds (a bar is for people; the task must not wait on it)."""

    def __init__(self, board: Any, every_s: float = 1.0) -> None:
        self.board, self.every_s, self.last = board, every_s, 0.0
        self.keys: list[tuple[str, Any]] = []  # by task id
        self.unposted: dict[tuple[str, Any], dict[str, Any]] = {}

    def add_task(self, description: str, **fields: Any) -> int:
        self.keys.append((fields["arm"], fields["seed"]))
        self.board.post.remote({self.keys[-1]: fields})
        return len(self.keys) - 1

    def update(self, task: int, **fields: Any) -> None:
        self.unposted.setdefault(self.keys[task], {}).update(fields)
        if time.monotonic() - self.last >= self.every_s:
            self.flush(wait=False)

    def flush(self, wait: bool = True) -> None:
        """Post what is not posted yet (`wait`: before the task returns, so the last bar is exact)."""
        ref = self.board.post.remote(self.unposted)
        self.last, self.unposted = time.monotonic(), {}
        if wait:
            ray.get(ref)


def gather(refs: list[Any], board: Any, progress: Any, bars: dict[tuple[str, Any], Any]) -> list[Any]:
    """`ray.get(refs)`, drawing the tasks' bars into the driver's `progress` (if any) while they
    run; a failed task's error is raised as soon as it is in."""
    results: dict[Any, Any] = {}
    while len(results) < len(refs):
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        if progress is not None:  # after a task returned, its bars' last post is in
            draw(progress, bars, ray.get(board.read.remote()))
        results.update((ref, ray.get(ref)) for ref in ready if ref not in results)
    return [results[ref] for ref in refs]


def worker_settings(scenario: Any) -> tuple[int, str]:
    """What every task sets first: torch's threads and the driver's cache folder."""

    return scenario.runtime.torch_threads, str(cache_dir())


def enter_task(threads: int, cache: str) -> None:
    """Ray sets OMP_NUM_THREADS=1 in its workers, so torch's threads are set explicitly; and the
    workers of a Ray session started before TESTBED_CACHE was set (a notebook's, a test's) would
    otherwise read and write another cache than the driver's."""
    configure_torch(threads)
    os.environ["TESTBED_CACHE"] = cache


@ray.remote
def run_arm_task(
    scenario_data: dict,
    arm_name: str,
    seed: int,
    policy: tuple,
    tokenizer: Any,
    policy_key: str,
    worker: tuple[int, str],
    board: Any,
    warmed: dict[str, bytes],
    relay: Any = None,
) -> tuple[dict, dict[str, list[dict]]]:

    enter_task(*worker)
    install_cache_files(warmed)
    scenario = parse_scenario(scenario_data, "<scenario>")
    arm = next(a for a in scenario.arms if a.name == arm_name)
    judge = build_judge(scenario)
    try:
        with tempfile.TemporaryDirectory(prefix="testbed-arm-") as scratch:
            store = RunStore(Path(scratch), scenario.output.flush_rows, scenario.output.flush_seconds)
            if relay is not None:  # the driver's trackers see the rows as they come
                store.sinks.append(RelayedRows(relay))
            progress = RemoteProgress(board)
            totals = runner_for(scenario, arm)(
                scenario,
                arm,
                seed,
                base_policy=build_policy(*policy),
                tokenizer=tokenizer,
                judge=judge,
                schedule=scenario.schedule_object(),
                store=store,
                progress=progress,
                log=lambda message: None,
                policy_key=policy_key,
            )
            progress.flush()
            store.flush()
            for sink in store.sinks:
                sink.flush()
            tables = {name: read_table(store.root, name).to_dict("records") for name in TABLES}
    finally:
        close = getattr(judge, "close", None)
        if callable(close):
            close()
    return totals, tables


@ray.remote
def warm_up_task(
    scenario_data: dict,
    arm_name: str,
    seed: int,
    policy: tuple,
    tokenizer: Any,
    policy_key: str,
    worker: tuple[int, str],
    board: Any,
) -> dict[str, bytes]:
    """`loop.warm_up_job` in a task: an arm's warm-up as its first job computes it, its bars on `board`."""

    enter_task(*worker)
    scenario = parse_scenario(scenario_data, "<scenario>")
    arm = next(a for a in scenario.arms if a.name == arm_name)
    judge = build_judge(scenario)
    progress = RemoteProgress(board)
    try:
        files = warm_up_job(
            scenario,
            arm,
            seed,
            base_policy=build_policy(*policy),
            tokenizer=tokenizer,
            judge=judge,
            schedule=scenario.schedule_object(),
            policy_key=policy_key,
            log=lambda message: None,
            progress=progress,
        )
        progress.flush()
        return files
    finally:
        close = getattr(judge, "close", None)
        if callable(close):
            close()


@ray.remote
def sft_task(
    scenario_data: dict, policy_data: dict, worker: tuple[int, str], board: Any, seed: int
) -> tuple[str, dict[str, bytes]]:
    """`load_or_train_policy` in a task, its bar on `board` as SFT seed `seed`; returns the cache
    directory's name and files."""

    enter_task(*worker)
    scenario = parse_scenario(scenario_data, "<scenario>")
    cfg = PolicyConfig.model_validate(policy_data)
    progress = RemoteProgress(board)
    _, _, report = load_or_train_policy(
        cfg,
        scenario.world.archetypes,
        evaluate=sft_evaluator(scenario),
        log=lambda message: None,
        env=scenario.env,
        on_step=StepBar(progress, "SFT", seed),
    )
    progress.flush()
    directory = cache_root() / f"policy-{report['key']}"
    return directory.name, {str(f.relative_to(directory)): f.read_bytes() for f in directory.rglob("*") if f.is_file()}


def train_policies_in_parallel(
    scenario: Any, configs: dict[int, Any], log: Callable[[str], None], progress: Any = None
) -> None:
    """Train the SFT policies of `configs` (by run seed) that the cache lacks, side by side, one
    task each, with a bar per seed in `progress` (else a display of their own), and put them into
    this process's cache (nodes need no shared disk)."""

    missing = {seed: c for seed, c in configs.items() if not is_cached(c, scenario.world.archetypes, scenario.env)}
    if len(missing) < 2:
        return
    log(f"training {len(missing)} SFT policies side by side (one per seed)")
    data, board = resolved_dict(scenario), ProgressBoard.remote()
    tasks = [
        sft_task.options(num_cpus=scenario.runtime.task_cpus).remote(
            data, c.model_dump(mode="json"), worker_settings(scenario), board, seed
        )
        for seed, c in missing.items()
    ]
    with contextlib.nullcontext(progress) if progress is not None else make_progress() as shown:
        trained = gather(tasks, board, shown, {})
    for name, files in trained:
        install_policy(name, files)


def install_policy(name: str, files: dict[str, bytes]) -> None:
    """A policy a task trained, into this process's cache (unless the task wrote it here already)."""

    target = cache_root() / name
    if (target / "sft_report.json").exists():
        return  # the same machine: the task wrote it here already
    tmp = target.with_name(f"{name}.tmp-driver")
    for rel, blob in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(blob)
    os.replace(tmp, target)


def install_cache_files(files: dict[str, bytes]) -> None:
    """The driver's warm-up results, into this node's cache (atomically). They replace a file of the
    same name: what a first job computes depends on its random stream, and this run's first jobs
    are the driver's."""

    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = root / name
        if not target.exists() or target.read_bytes() != data:
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, target)


def run_arms_in_parallel(
    scenario: Any,
    jobs: list[tuple[Any, int]],
    *,
    starts: dict[int, Any],
    store: RunStore,
    on_done: Callable[[str, int, dict], None],
    log: Callable[[str], None],
    progress: Any = None,
) -> None:
    """Run every (arm, seed) of `jobs` as a Ray task; as each finishes, append its rows to the
    run directory and call `on_done(arm, seed, totals)`. With a `rich.progress.Progress`, each
    task's bars (a warm-up's, an arm's) are drawn there as it runs.

    First, each arm's trainer warm-up (SAO's value pretraining) is computed by a task of its own,
    as the arm's first job computes it when the jobs run one after another (`loop.first_jobs`);
    the results reach every task's cache through the object store, and the driver's."""

    data = resolved_dict(scenario)
    refs = share_starting_policies(starts)

    def args(seed: int) -> tuple:
        return refs[starts[seed].key], starts[seed].tokenizer, starts[seed].key

    worker = worker_settings(scenario)
    slot = {"num_cpus": scenario.runtime.task_cpus, "num_gpus": gpus(scenario.runtime, "task")}  # task_gpus: CUDA
    board, bars = ProgressBoard.remote(), {}
    warming = [
        warm_up_task.options(**slot).remote(data, arm.name, seed, *args(seed), worker, board)
        for arm, seed in first_jobs(scenario, jobs, key=lambda seed: starts[seed].key)
    ]
    if warming:
        log(f"warming up {len(warming)} trainer(s) side by side (as each arm's first job would)")
    warmed = {name: blob for files in gather(warming, board, progress, bars) for name, blob in files.items()}
    install_cache_files(warmed)
    warmed_ref = ray.put(warmed)
    relay = RowRelay.remote() if store.sinks else None  # only a tracked run relays its rows
    pending = {
        run_arm_task.options(**slot).remote(data, arm.name, seed, *args(seed), worker, board, warmed_ref, relay): (
            arm.name,
            seed,
        )
        for arm, seed in jobs
    }
    log(f"running {len(pending)} arm x seed tasks side by side on Ray")
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        if progress is not None:  # after a task returned, its bar's last post is in
            draw(progress, bars, ray.get(board.read.remote()))
        if relay is not None:  # after a task returned, its last rows are in
            forward(relay, store)
        if not ready:
            continue
        arm_name, seed = pending.pop(ready[0])
        totals, tables = ray.get(ready[0])
        append_task_rows(store, tables, relayed=relay is not None)
        on_done(arm_name, seed, totals)


def share_starting_policies(starts: dict[int, Any]) -> dict[str, Any]:
    """One object-store copy per starting policy (one for the run, or one per seed), by its key."""
    refs: dict[str, Any] = {}
    for start in starts.values():
        if start.key not in refs:
            state = {k: v.detach().clone() for k, v in start.policy.state_dict().items()}
            refs[start.key] = ray.put((start.policy.config, state))
    return refs


def append_task_rows(store: RunStore, tables: dict[str, list[dict]], relayed: bool) -> None:
    """A finished task's rows into the run directory (NaN as null). Rows a tracked run relayed
    while the task ran reached the trackers then: they are not sent to them again."""
    sinks, store.sinks = store.sinks, ([] if relayed else store.sinks)
    for name, rows in tables.items():
        if rows:
            store.append(
                name,
                [{k: (None if v != v and isinstance(v, float) else v) for k, v in row.items()} for row in rows],
            )
    store.sinks = sinks
    store.flush()


def draw(progress: Any, bars: dict[tuple[str, int], Any], posted: dict[tuple[str, int], dict[str, Any]]) -> None:
    """Bring the driver's bars up to what the tasks posted; a task's first post adds its bar."""
    for (arm_name, seed), fields in sorted(posted.items()):
        if (arm_name, seed) not in bars:
            bars[(arm_name, seed)] = progress.add_task(
                "", **{"arm": arm_name, "seed": seed, "target": "", "reward": "  -  ", **fields}
            )
        else:
            progress.update(bars[(arm_name, seed)], **fields)
