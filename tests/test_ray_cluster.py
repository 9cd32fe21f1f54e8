"""The Ray runtime on a cluster it did not start: `ray start --head` and a second node, with token
authentication, in a temporary directory (tests/separate_cluster.py), reached through
`runtime.address` by the real CLI in its own process, as a user's driver reaches theirs.

One run covers what a user sends to a cluster: two synchronous arms side by side as Ray tasks
(parallel arms), and asynchronous arms with one and with two rollout actors, whose learners are two
data-parallel ranks (`replicate`, then `fsdp`). Every arm's clock is contiguous. The simulated
runtime runs in the driver and uses no Ray (testbed/runtimes/dispatch.py), so it has nothing to send.
A cluster that cannot take the job stops the run with exit 2 and a message, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from testbed.runtimes.ray.cluster import SHIPPED_PACKAGES, ClusterError, project_modules  # noqa: E402
from testbed.store import read_table  # noqa: E402
from tests.separate_cluster import SeparateCluster, free_port, separate_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = str(ROOT / "tests" / "data" / "tiny.yaml")
BUDGET = 64
RM = "type: running_mean, args: {window: 32, episodes_per_update: 16}"
ARMS = (
    f"arms=[{{name: sync_a, {RM}}}, {{name: sync_b, type: running_mean, args: {{window: 16, episodes_per_update: 16}}}}, "
    f"{{name: one_actor_fsdp, {RM}, runtime: {{kind: ray, rollout_workers: 1, learner_workers: 2, "
    "learner_strategy: fsdp}}, "
    f"{{name: two_actors_ddp, {RM}, runtime: {{kind: ray, rollout_workers: 2, max_staleness: 1, learner_workers: 2, "
    "learner_strategy: replicate}}]"
)


@pytest.fixture(scope="module")
def cluster():
    with separate_cluster(nodes=2, cpus_per_node=2) as started:
        yield started


def cli(cluster: SeparateCluster, tmp_path: Path, name: str, *extra: str, env: dict | None = None):
    """`python -m testbed.run` in a process of its own, pointed at the cluster."""
    command = [
        sys.executable, "-m", "testbed.run", SCENARIO, "--out", str(tmp_path), "--run-name", name, "--no-report",
        "--set", "seeds=[0]", "--set", f"budget.episodes={BUDGET}", "--set", "eval.every=32",
        "--set", f"runtime.address={cluster.address}", *extra,
    ]  # fmt: skip
    environment = {**os.environ, **cluster.env, **(env or {})}
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900)


def test_the_shipped_packages_are_found_from_the_packages_themselves():
    import judges
    import testbed
    import trainers

    expected = [str(Path(m.__file__).resolve().parent) for m in (testbed, trainers, judges)]
    assert [str(Path(p).resolve()) for p in project_modules()] == expected
    assert all((Path(p) / "__init__.py").is_file() for p in project_modules())


def test_a_package_that_cannot_be_found_is_an_error_never_an_empty_list(monkeypatch):
    monkeypatch.setattr("testbed.runtimes.ray.cluster.SHIPPED_PACKAGES", (*SHIPPED_PACKAGES, "no_such_package_here"))
    with pytest.raises(ClusterError, match="no_such_package_here"):
        project_modules()


def test_every_kind_of_ray_work_runs_on_a_separate_cluster(cluster, tmp_path, shared_cache):
    assert cluster.alive_nodes() == 2
    done = cli(
        cluster, tmp_path, "on_cluster", "--set", ARMS, "--set", "runtime.parallel_arms=true",
        env={"TESTBED_CACHE": str(shared_cache)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    run_dir = tmp_path / "on_cluster"
    episodes = read_table(run_dir, "episodes")
    judged = episodes[episodes["judge_error"].isna()]
    assert set(judged["arm"]) == {"sync_a", "sync_b", "one_actor_fsdp", "two_actors_ddp"}
    for arm, rows in judged.groupby("arm"):
        assert sorted(rows["t"]) == list(range(BUDGET)), f"{arm}: clock values missing or duplicated"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "done"
    runtimes = {arm: manifest["arms"][arm]["0"].get("runtime", {}) for arm in ("one_actor_fsdp", "two_actors_ddp")}
    assert runtimes["one_actor_fsdp"]["rollout_workers"] == 1 and runtimes["two_actors_ddp"]["rollout_workers"] == 2
    updates = read_table(run_dir, "updates")
    for arm in ("one_actor_fsdp", "two_actors_ddp"):
        assert (updates[updates.arm == arm]["learner_workers"] == 2).all()
    assert "Traceback" not in done.stderr


def test_a_driver_without_the_token_stops_before_training_with_the_reason(cluster, tmp_path, shared_cache):
    done = cli(
        cluster, tmp_path, "no_token", "--runtime", "ray",
        env={"TESTBED_CACHE": str(shared_cache), "RAY_AUTH_TOKEN": "0" * 64, "RAY_AUTH_TOKEN_PATH": ""},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"cannot connect to the Ray cluster at {cluster.address}" in done.stderr
    assert "token" in done.stderr and "Traceback" not in done.stderr
    assert "0" * 64 not in done.stdout + done.stderr  # the token itself is never printed
    manifest = json.loads((tmp_path / "no_token" / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and cluster.address in manifest["stop_reason"]


def test_an_address_where_nothing_answers_is_named_at_once(tmp_path, shared_cache):
    address = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, "-m", "testbed.run", SCENARIO, "--out", str(tmp_path), "--run-name", "nowhere", "--no-report",
        "--set", "seeds=[0]", "--runtime", "ray", "--set", f"runtime.address={address}", "--verbose",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env={**os.environ, "TESTBED_CACHE": str(shared_cache)}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"nothing answers at {address}" in done.stderr
    assert "Traceback" in done.stderr  # --verbose shows what lies behind the message


def test_a_runtime_environment_a_node_cannot_build_is_a_cluster_error(cluster):
    """A package the nodes cannot fetch (as a node that joined without the job's files) fails each
    node's probe by name, before any actor is sent there. In a process of its own: Ray reads the
    token's mode when it is imported."""
    missing = "gcs://_ray_pkg_0123456789abcdef.zip"
    code = (
        "import ray\n"
        "from testbed.runtimes.ray.cluster import ClusterError, check_nodes\n"
        f"ray.init(address={cluster.address!r}, runtime_env={{'py_modules': [{missing!r}]}})\n"
        "try:\n"
        f"    check_nodes({cluster.address!r}, [{missing!r}])\n"
        "except ClusterError as exc:\n"
        "    print('ClusterError:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **cluster.env}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert "ClusterError:" in done.stdout, done.stderr[-3000:]
    assert "cannot build the job's runtime environment" in done.stdout and missing in done.stdout
