"""A local Ray run listens on the loopback address only: started through the project's own path
(`ray_session` with no address), every TCP socket listening in the driver's process tree (the
driver, the GCS, the raylet, the agents, the workers, and two learners' torch.distributed group)
is on 127.0.0.1 or ::1."""

from __future__ import annotations

import ipaddress
import os
import time
from pathlib import Path

import psutil
import pytest
import torch

ray = pytest.importorskip("ray")

from testbed.runtimes.ray.cluster import ray_session  # noqa: E402
from testbed.runtimes.ray.learner import join_process_group, rendezvous_address  # noqa: E402
from testbed.scenario.schema import RuntimeConfig  # noqa: E402


def listening() -> list[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket of this process and its
    descendants."""
    found = []
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            name, conns = proc.name(), proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:  # a worker that exited while we looked
            continue
        found += [(c.laddr.ip, c.laddr.port, name) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    if address.version == 6 and address.ipv4_mapped:  # a dual-stack socket bound to 127.0.0.1
        address = address.ipv4_mapped
    return address.is_loopback


@ray.remote(num_cpus=0)
class Echo:
    def ping(self) -> str:
        return ray.util.get_node_ip_address()


@ray.remote(num_cpus=0)
class Rank:
    """One learner's share of the process group, without a trainer: the group is what listens."""

    def rendezvous(self) -> str:
        return rendezvous_address()

    def join(self, init_method: str, rank: int) -> float:
        import torch.distributed as dist

        join_process_group(init_method, rank, world=2, timeout_s=120)
        total = torch.ones(1)
        dist.all_reduce(total)  # the ranks did connect
        return total.item()


def test_a_local_run_listens_on_loopback_only(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    assert not ray.is_initialized()
    init_method = ""
    try:
        with ray_session(RuntimeConfig(kind="ray")):
            # an actor's worker runs a gRPC server of its own: keep one alive among the sockets
            echo = Echo.remote()
            node_ip = ray.get(echo.ping.remote(), timeout=120)
            ranks = [Rank.remote() for _ in range(2)]
            init_method = ray.get(ranks[0].rendezvous.remote(), timeout=120)
            assert ray.get([r.join.remote(init_method, i) for i, r in enumerate(ranks)], timeout=180) == [2.0, 2.0]
            time.sleep(1)  # the workers Ray starts ahead of need open their servers
            sockets = listening()
    finally:
        ray.shutdown()
        if init_method.startswith("file://"):
            Path(init_method.removeprefix("file://")).unlink(missing_ok=True)
    names = {name for _, _, name in sockets}
    # not vacuous: the processes that listen did show their sockets
    assert {"gcs_server", "raylet", "ray::Echo", "ray::Rank"} <= names, sorted(names)
    exposed = [s for s in sockets if not is_loopback(s[0])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert is_loopback(node_ip)  # the node address the workers advertise
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ  # the setting stays inside the start
