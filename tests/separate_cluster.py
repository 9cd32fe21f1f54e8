"""A Ray cluster started the way a user starts one (`ray start --head`, then `ray start --address`
for a second node), separate from the process that uses it: its own temporary directory, token
authentication (RAY_AUTH_MODE=token with a fresh token file), its own ports. Stopped by the ids of
the processes it started (each `ray start --block` leads a process group holding its node's GCS,
raylet, agents and workers), never by `ray stop`, which would stop every Ray on the machine.

Used by tests/test_ray_cluster.py and benchmarks/ray_fault_drill.py.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SeparateCluster:
    address: str
    directory: Path
    env: dict[str, str]  # what a driver needs to reach it: the token's mode and file, no token itself
    nodes: list[subprocess.Popen] = field(default_factory=list)

    def ray(self, *args: str, timeout: float = 60) -> str:
        """A `ray` CLI command against this cluster, its output."""
        ray = str(Path(sys.executable).with_name("ray"))
        out = subprocess.run(
            [ray, *args], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout
        )
        return out.stdout + out.stderr

    def alive_nodes(self) -> int:
        return self.ray("status", "--address", self.address).count(" node_")

    def stop(self) -> None:
        """SIGTERM to each node's process group, SIGKILL to what is left after a grace period."""
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        deadline = time.time() + 3  # the nodes drain for up to 30 s on SIGTERM; a test cluster need not
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(max(0.1, deadline - time.time()))
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)  # the group's raylet, GCS and workers too
            node.wait(10)


def start_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    ray = str(Path(sys.executable).with_name("ray"))
    with log.open("w") as out:
        return subprocess.Popen(
            [ray, "start", "--block", "--disable-usage-stats", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own: stopped by its id
        )


@contextlib.contextmanager
def separate_cluster(nodes: int = 2, cpus_per_node: int = 2, timeout_s: float = 120) -> Iterator[SeparateCluster]:
    # A short path: Ray's unix sockets live under the temporary directory (at most 107 characters).
    directory = Path(tempfile.mkdtemp(prefix="raycl", dir="/tmp"))
    token = directory / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    full_env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")} | env
    port = free_port()
    cluster = SeparateCluster(f"127.0.0.1:{port}", directory, env)
    try:
        head = [
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--ray-client-server-port={free_port()}",  # its default (10001) would clash with another cluster
            f"--num-cpus={cpus_per_node}",
            "--include-dashboard=false",
            f"--temp-dir={directory / 'ray'}",
        ]
        cluster.nodes.append(start_node(head, full_env, directory / "head.log"))
        deadline = time.time() + timeout_s
        while cluster.alive_nodes() < 1:
            if time.time() > deadline or cluster.nodes[0].poll() is not None:
                raise RuntimeError(f"the head did not start: {(directory / 'head.log').read_text()[-2000:]}")
            time.sleep(0.5)
        for i in range(1, nodes):
            # A second node on this machine shares the head's temporary directory (its session).
            worker = [f"--address={cluster.address}", f"--num-cpus={cpus_per_node}", f"--temp-dir={directory / 'ray'}"]
            cluster.nodes.append(start_node(worker, full_env, directory / f"node{i}.log"))
        while cluster.alive_nodes() < nodes:
            if time.time() > deadline or any(n.poll() is not None for n in cluster.nodes):
                logs = "".join(p.read_text()[-1000:] for p in sorted(directory.glob("*.log")))
                raise RuntimeError(f"the cluster's {nodes} nodes did not start: {logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
