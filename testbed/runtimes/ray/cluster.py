"""Connecting to Ray: an existing cluster (`runtime.address`, else RAY_ADDRESS) or a local one.

Nothing here assumes one machine: the policy, the critic's warm-up and every weight update reach
the workers through Ray's object store, never through a shared disk. On a cluster, the project's
packages travel with the job (`py_modules`), so the nodes need only the dependencies installed.
A local instance listens on the loopback address only (`start_local`, docs/ray.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.cpu_numerics import worker_env
from testbed.scenario.schema import RuntimeConfig

WORKER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false"}
LOOPBACK = "127.0.0.1"
# Ray's switch between a local-only node address and a routable one (named for the platforms where
# local-only is its default). ray_constants reads it once, when ray is imported.
CLUSTER_MODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def start_local(**kwargs: Any) -> None:
    """`ray.init` for a local instance whose every process listens on the loopback address only.

    Ray (2.60) binds the GCS, the raylet's node and object managers and every worker's gRPC server
    to all interfaces, and the runtime-env agent to the node's address, unless that address is a
    loopback one; and `ray.init` replaces a loopback `_node_ip_address` with the machine's routable
    address while its cluster mode is on. So the mode is off while the instance starts: in this
    process (the value ray read at import) and in the environment the Ray processes inherit. A
    node that came up elsewhere anyway is shut down: a local run never listens on an external
    interface."""
    import ray  # on use, like every Ray import here: importing this module loads no Ray
    from ray._private import ray_constants

    saved_env, saved_mode = os.environ.get(CLUSTER_MODE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[CLUSTER_MODE_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        # "local": a new instance even where RAY_ADDRESS names a cluster
        ray.init(address="local", _node_ip_address=LOOPBACK, include_dashboard=False, **kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_mode
        if saved_env is None:
            os.environ.pop(CLUSTER_MODE_ENV, None)
        else:
            os.environ[CLUSTER_MODE_ENV] = saved_env
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        ray.shutdown()
        raise RuntimeError(
            f"the local Ray node came up on {node_ip}, not the loopback address; "
            "its processes would listen on every interface (docs/ray.md)"
        )


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
        start_local(num_cpus=os.cpu_count() or 1, runtime_env={"env_vars": env}, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
