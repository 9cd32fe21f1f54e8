import os

# Offline, deterministic, quiet: set before any test imports the libraries that read these.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the models are tiny: one BLAS thread is fastest
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Portable numerics: the same rows on every x86-64 processor. `import testbed` pins the kernels
# from TESTBED_NUMERICS; it must come before anything loads torch (testbed/cpu_numerics.py).
os.environ["TESTBED_NUMERICS"] = "portable"
from pathlib import Path

import pytest
from hypothesis import settings

import testbed  # noqa: F401

# The property tests draw the same examples on every machine and every day, so `make test` gives
# one verdict per commit: a random draw once turned a clean checkout's CI red on an old bug. New
# examples are searched for on purpose, `make fuzz` (pytest --hypothesis-profile=explore), and a
# failure it finds is pinned with @example. A command-line profile overrides this default.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("repeatable")


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One TESTBED_CACHE for the CLI tests that do not test caching itself: the tiny SFT runs once.
    TESTBED_TEST_CACHE names a directory to reuse across sessions (a developer's convenience)."""
    reuse = os.environ.get("TESTBED_TEST_CACHE")
    if reuse:
        return Path(reuse)
    # One cache for every pytest-xdist worker of this session (their base folders share a parent):
    # each SFT policy is trained once, the other worker waits for it (a file lock in the cache).
    root = tmp_path_factory.getbasetemp()
    path = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "testbed-cache"
    path.mkdir(exist_ok=True)
    return path


# Modules whose module-scoped fixture is most of their cost (a two-rank spawn, a tracked run, a
# tiny run for the notebooks, a judge server) and the longest single tests. pytest-xdist's worksteal
# gives each worker a contiguous half of the collection and steals from the tail of a queue: a
# module split across the two workers pays its fixture twice (the FSDP spawn took 45 s on each).
# Collected first, they run at the head of the first worker's queue, where nothing steals them.
FIRST = (
    "test_sft_quality.py",
    "test_fsdp.py",
    "test_tracking.py",
    "test_notebooks.py",
    "test_data_parallel.py",
    "test_hub_models.py",
    "test_llm_judge.py",
    "test_judge_server.py",
    "test_judge_server_attacks.py",
    "test_judge_drills.py",
    "test_rescore.py",
    "test_remote_reward.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order
