"""Connecting to Ray: an existing cluster (`runtime.address`, else RAY_ADDRESS) or a local one.

Nothing here assumes one machine: the policy, the critic's warm-up and every weight update reach
the workers through Ray's object store, never through a shared disk. On a cluster, the project's
packages travel with the job (`py_modules`), so the nodes need only the dependencies installed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from testbed.scenario.schema import RuntimeConfig
from testbed.cpu_numerics import worker_env

WORKER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false"}


@contextlib.contextmanager
def ray_session(runtime: RuntimeConfig) -> Iterator[None]:
    """Use the Ray session already running (a test's, a notebook's), or start one and shut it
    down afterwards."""
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env = {**WORKER_ENV, **worker_env()}  # the workers compute with the driver's kernels
    address = runtime.address or os.environ.get("RAY_ADDRESS")
    if address:
        root = Path(__file__).resolve().parents[2]
        modules = [str(root / name) for name in ("testbed", "trainers", "judges") if (root / name).is_dir()]
        ray.init(address=address, runtime_env={"env_vars": env, "py_modules": modules})
    else:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, runtime_env={"env_vars": env},
                 log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
