"""Arms x seeds side by side: each runs as its own Ray task (`runtime.parallel_arms: true`).

A task runs one arm x seed exactly as it would run alone (the synchronous loop, or the Ray
runtime's actors), into a private store in its own scratch directory, and hands the finished
tables back through Ray's object store; the driver alone writes the run directory. So the rows
are those of running the arms one after another, and no task needs the driver's disk.

The unit of durability is one arm x seed: a finished one is in the run directory and the
manifest; one interrupted mid-way starts again from its beginning on `--resume`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import torch

from testbed.store import TABLES, RunStore, read_table


@ray.remote
def run_arm_task(scenario_data: dict, arm_name: str, seed: int, policy: tuple, tokenizer: Any, policy_key: str,
                 threads: int) -> tuple[dict, dict[str, list[dict]]]:
    from testbed.config import parse_scenario
    from testbed.distributed.rollout import build_policy
    from testbed.run import arm_runner, build_judge

    torch.set_num_threads(threads)  # Ray sets OMP_NUM_THREADS=1 in its workers
    scenario = parse_scenario(scenario_data, "<scenario>")
    arm = next(a for a in scenario.arms if a.name == arm_name)
    judge = build_judge(scenario)
    try:
        with tempfile.TemporaryDirectory(prefix="testbed-arm-") as scratch:
            store = RunStore(Path(scratch), scenario.output.flush_rows, scenario.output.flush_seconds)
            totals = arm_runner(scenario, arm)(scenario, arm, seed, base_policy=build_policy(*policy), tokenizer=tokenizer,
                                               judge=judge, schedule=scenario.schedule_object(), store=store,
                                               log=lambda message: None, policy_key=policy_key)
            store.flush()
            tables = {name: read_table(store.root, name).to_dict("records") for name in TABLES}
    finally:
        close = getattr(judge, "close", None)
        if callable(close):
            close()
    return totals, tables


def run_arms_in_parallel(scenario: Any, jobs: list[tuple[Any, int]], *, base_policy: torch.nn.Module, tokenizer: Any,
                         policy_key: str, store: RunStore, on_done: Callable[[str, int, dict], None],
                         log: Callable[[str], None]) -> None:
    """Run every (arm, seed) of `jobs` as a Ray task; as each finishes, append its rows to the
    run directory and call `on_done(arm, seed, totals)`."""
    from testbed.run import resolved_dict

    data = resolved_dict(scenario)
    policy = ray.put((base_policy.config, {k: v.detach().clone() for k, v in base_policy.state_dict().items()}))
    threads = scenario.runtime.torch_threads
    pending = {run_arm_task.options(num_cpus=scenario.runtime.actor_cpus).remote(
        data, arm.name, seed, policy, tokenizer, policy_key, threads): (arm.name, seed) for arm, seed in jobs}
    log(f"running {len(pending)} arm x seed tasks side by side on Ray")
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        arm_name, seed = pending.pop(ready[0])
        totals, tables = ray.get(ready[0])
        for name, rows in tables.items():
            if rows:
                store.append(name, [{k: (None if v != v and isinstance(v, float) else v) for k, v in row.items()} for row in rows])
        store.flush()
        on_done(arm_name, seed, totals)
        log(f"{arm_name} seed {seed} finished: {totals['episodes']} episodes in {totals['wall_s']:.0f} s")
