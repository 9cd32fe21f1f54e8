"""Connecting to Ray: an existing cluster (`runtime.address`, else RAY_ADDRESS) or a local one.

Nothing here assumes one machine: the policy, the critic's warm-up and every weight update reach
the workers through Ray's object store, never through a shared disk. On a cluster, the project's
packages travel with the job (`py_modules`, found from the imported packages themselves), so the
nodes need only the dependencies installed; before any work is sent, one probe per node checks
that its workers can be built and import what the driver imports (`check_nodes`). A cluster that
cannot take the job is a `ClusterError` that names the address, what failed and what to check.
A local instance listens on the loopback address only (`start_local`, docs/ray.md).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

from testbed.cpu_numerics import worker_env
from testbed.scenario.schema import RuntimeConfig

WORKER_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false"}
LOOPBACK = "127.0.0.1"
# Ray's switch between a local-only node address and a routable one (named for the platforms where
# local-only is its default). ray_constants reads it once, when ray is imported.
CLUSTER_MODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# What a job's workers import: the core, the trainers and the judges (analysis runs on the driver).
SHIPPED_PACKAGES = ("testbed", "trainers", "judges")
# Distributions whose versions decide a worker's rows (ray itself refuses another version or Python).
ROW_PACKAGES = ("torch", "transformers", "tokenizers", "numpy")
PROBE_TIMEOUT_S = 300.0  # the first runtime environment on a node uploads and unpacks the packages
TOKEN_HINT = (
    "check the token: RAY_AUTH_MODE=token here, and the same token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
    "~/.ray/auth_token) here as on the cluster's nodes"
)
NODES_HINT = (
    "check the Python and package versions on the nodes (the driver's: {versions}; install them there with "
    "pip install -c constraints.txt -e .) and the py_modules the job ships: {modules}"
)


class ClusterError(RuntimeError):
    """A Ray cluster cannot take the job: connecting, authenticating, or building a worker's runtime
    environment failed. The message says where, what and what to check; no traceback is needed."""


def project_modules() -> list[str]:
    """The directories of the packages a job's workers import, from the packages themselves (wherever
    they are installed: a checkout, an editable install, site-packages), as Ray's `py_modules`."""
    modules = []
    for name in SHIPPED_PACKAGES:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if len(locations) != 1:
            raise ClusterError(
                f"cannot ship the package {name!r} to the cluster: it is "
                f"{'not importable here' if not locations else f'spread over {locations}'}"
            )
        modules.append(locations[0])
    return modules


def driver_versions() -> dict[str, str]:
    """Python's and the row-deciding packages' versions in this process."""
    versions = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in ROW_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def nodes_hint(modules: list[str]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in driver_versions().items())
    return NODES_HINT.format(versions=versions, modules=modules) + " (docs/ray.md)"


def connect_hint(exc: BaseException, address: str) -> str:
    """What to check when `ray.init` fails: the token, where the GCS refused or wanted one; else
    that a head listens there; a version mismatch names itself."""
    text = str(exc)
    if "uthenticat" in type(exc).__name__ + text or "InvalidAuthToken" in text:
        return TOKEN_HINT + " (docs/ray.md)"
    if "ersion" in text:
        return "the driver and the cluster must run the same Python and Ray versions (docs/ray.md)"
    return f"check that a Ray head listens at {address} (`ray status --address {address}` there) and " + TOKEN_HINT


# Where Ray says, as a warning, that it turned token authentication on for a new local instance (its
# default, kept: docs/ray.md). Nothing for the user to do, and on a first run it read like a fault.
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


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
    logging.getLogger(TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
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


def connect(address: str) -> list[str]:
    """`ray.init` on an existing cluster with the job's runtime environment (the numerics variables
    and the project's packages), then `check_nodes`; the py_modules shipped. Failures are ClusterErrors."""
    import ray

    modules = project_modules()
    check_listening(address)
    env = {**WORKER_ENV, **worker_env()}  # the workers compute with the driver's kernels
    try:
        ray.init(address=address, runtime_env={"env_vars": env, "py_modules": modules})
    except Exception as exc:  # ConnectionError, AuthenticationError, a version mismatch (RuntimeError)
        raise ClusterError(
            f"cannot connect to the Ray cluster at {address} ({type(exc).__name__}: {first_line(exc)}); "
            + connect_hint(exc, address)
        ) from exc
    try:
        check_nodes(address, modules)
    except BaseException:
        ray.shutdown()
        raise
    return modules


def check_listening(address: str, timeout_s: float = 5.0) -> None:
    """A `host:port` address where nothing answers is an error at once: `ray.init` would retry for
    about 14 minutes (20 tries of ~40 s) before it gives up. Other forms (`auto`, `ray://`) go to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(
            f"nothing answers at {address}, the Ray cluster's address ({exc.strerror or type(exc).__name__}): "
            f"check runtime.address (or RAY_ADDRESS) against the head's `ray start --head --port` and that the "
            f"head is running (`ray status --address {address}` there)"
        ) from exc


def first_line(exc: BaseException) -> str:
    """An exception's first sentence: Ray's messages run to paragraphs and tracebacks."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    line = lines[0] if lines else "no message"
    return line.split(". ")[0].rstrip(".")


def node_report() -> dict[str, Any]:
    """What a worker of this job finds on its node: the project's packages imported, the versions."""
    import importlib

    import ray

    for name in SHIPPED_PACKAGES:  # by name, as the registry loads them: an import error here is the node's fault
        importlib.import_module(name)
    return {"node": ray.get_runtime_context().get_node_id(), "versions": driver_versions()}


def check_nodes(address: str, modules: list[str]) -> None:
    """One probe per alive node, pinned to it: its runtime environment is built (the packages
    unpacked), the project imported, and its row-deciding versions equal the driver's. A node that
    cannot is a ClusterError before any work is sent, not a stalled actor mid-run."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(node_report)
    nodes = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
    refs = {
        node: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        for node in nodes
    }
    mine = driver_versions()
    for node, ref in refs.items():
        where = f"the node {nodes[node]} of the Ray cluster at {address}"
        try:
            report = ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except ray.exceptions.RuntimeEnvSetupError as exc:
            raise ClusterError(
                f"{where} cannot build the job's runtime environment ({first_line(exc)}); " + nodes_hint(modules)
            ) from exc
        except ray.exceptions.GetTimeoutError as exc:
            raise ClusterError(
                f"{where} started no worker for the job within {PROBE_TIMEOUT_S:.0f} s; " + nodes_hint(modules)
            ) from exc
        except ray.exceptions.RayError as exc:
            cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else exc
            raise ClusterError(
                f"{where}: a worker of the job failed to import the project "
                f"({type(cause).__name__}: {first_line(cause)}); " + nodes_hint(modules)
            ) from exc
        differ = {k: (v, mine.get(k)) for k, v in report["versions"].items() if v != mine.get(k)}
        if differ:
            said = ", ".join(f"{k} {theirs} (the driver: {ours})" for k, (theirs, ours) in differ.items())
            raise ClusterError(
                f"{where} has other versions than the driver: {said}; the same seed would write other rows there. "
                "Install the driver's versions on every node (pip install -c constraints.txt -e .)"
            )


@contextlib.contextmanager
def ray_session(runtime: RuntimeConfig) -> Iterator[None]:
    """Use the Ray session already running (a test's, a notebook's), or start one and shut it
    down afterwards. On a cluster, a worker whose runtime environment cannot be built mid-run (a
    node that joined without the packages' dependencies) is a ClusterError too."""
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = runtime.address or os.environ.get("RAY_ADDRESS")
    if address:
        modules = connect(address)
    else:
        env = {**WORKER_ENV, **worker_env()}  # the workers compute with the driver's kernels
        start_local(num_cpus=os.cpu_count() or 1, runtime_env={"env_vars": env}, log_to_driver=False)
    try:
        yield
    except ray.exceptions.RuntimeEnvSetupError as exc:
        if not address:
            raise
        raise ClusterError(
            f"a worker of the Ray cluster at {address} could not build the job's runtime environment mid-run "
            f"({first_line(exc)}); " + nodes_hint(modules)
        ) from exc
    finally:
        ray.shutdown()
