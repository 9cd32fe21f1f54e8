"""The loop's judge counts with the LLM judge, through the real CLI, LiteLLM and the local judge
server: `judge_calls` in updates.parquet counts the training episodes judged plus failures, cold
and when a rerun is served from the verdict cache; evaluation calls and cache hits are named on
their own, and the judge's own counters (`llm_*`) never overwrite the loop's."""

from __future__ import annotations

from pathlib import Path

from testbed.cli.run_command import main
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
ARGS = [
    "--set",
    "judge={type: llm, args: {model: openai/testbed-rubric, local_server: {judge: rubric}, concurrency: 8}}",
    "--set",
    "seeds=[0]",
    "--set",
    "budget.episodes=64",
    "--set",
    "eval.every=32",
]


def run(tmp_path: Path, name: str, *extra: str) -> Path:
    cache = ["--set", f"judge.args.cache_path={tmp_path / 'verdicts.sqlite'}"]  # this test's own verdict cache
    args = [str(ROOT / "tests/data/tiny.yaml"), "--out", str(tmp_path), "--run-name", name, *ARGS, *cache, *extra]
    assert main(args) == 0
    return tmp_path / name


def check_counts(run_dir: Path) -> dict:
    episodes, updates = read_table(run_dir, "episodes"), read_table(run_dir, "updates")
    last = updates.sort_values("update").iloc[-1]
    trained_on = episodes[episodes["t"] < last["t"]]  # the episodes judged up to the last update
    assert last["judge_calls"] == len(trained_on) == last["t"]  # no failures here: calls = judged episodes
    assert last["judge_failures"] == 0
    assert last["eval_judge_calls"] == 16 * 2  # held-out evaluations at t=0 and t=32, 16 prompts each
    assert updates["judge_calls"].is_monotonic_increasing and updates["judge_calls"].iloc[0] == 16
    return last.to_dict()


def test_judge_calls_count_training_episodes_cold_and_from_the_cache(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    cold = check_counts(run(tmp_path, "cold", "--no-report"))  # the cached run's report is the one read
    assert cold["llm_cache_hits"] == 0 and cold["llm_requests"] >= cold["judge_calls"] + cold["eval_judge_calls"]
    cached = check_counts(run(tmp_path, "cached"))  # the same seed: every verdict is in the cache now
    assert cached["judge_calls"] == cold["judge_calls"]
    assert cached["llm_cache_hits"] >= cached["judge_calls"] and cached["llm_calls"] == 0
    figure = tmp_path / "cached" / "figures" / "reward_vs_judge_calls.png"
    assert figure.stat().st_size > 10_000
