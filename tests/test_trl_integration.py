"""The drifting reward inside TRL's real GRPOTrainer (testbed/integrations/trl.py): the testbed's tiny
SFT policy exported as a Hub checkpoint, a few GRPO steps across both of tiny.yaml's switches, the
testbed's rows in the run directory, then `python -m analysis.report` on it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cli.export import main as export_main
from testbed.integrations.session import DriftSession
from testbed.store import read_table

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests/data/tiny.yaml")
# 6 steps of 4 prompts x 4 completions: 96 judged completions, tiny.yaml's switches at 38 and 67
SIZES = ["budget.episodes=96", "eval.every=32", "eval.prompts=8", "eval.reference_samples=1"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared_cache):
    directory = tmp_path_factory.mktemp("trl") / "tiny-sft"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESTBED_CACHE", str(shared_cache))
        assert export_main([str(directory), "--scenario", TINY]) == 0
    return directory


def test_grpo_trainer_runs_across_the_switches_and_the_report_reads_its_run(exported, tmp_path):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from analysis.report import main as report_main
    from testbed.integrations.trl import DriftCallback, DriftReward, drift_dataset

    run_dir = tmp_path / "trl-run"
    session = DriftSession(TINY, run_dir, arm="trl_grpo", overrides=SIZES)
    reward = DriftReward(session)
    config = GRPOConfig(
        output_dir=str(tmp_path / "trl-out"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        max_steps=6,
        learning_rate=1e-3,
        beta=0.0,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=24,
        temperature=1.0,
        top_k=0,
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=str(exported),
            processing_class=AutoTokenizer.from_pretrained(exported),
            reward_funcs=reward,
            args=config,
            train_dataset=drift_dataset(session, 64),
            callbacks=[DriftCallback(reward)],
        )
        trainer.train()

    schedule = session.schedule
    episodes = read_table(run_dir, "episodes").sort_values("t")
    assert episodes["t"].tolist() == list(range(96))  # one clock value per judged completion
    assert (episodes["target_style"] == episodes["t"].map(lambda t: schedule.target(t).style)).all()
    assert set(episodes["target_style"]) == {"cute", "chuunibyou", "classical"}  # both switches crossed
    # each judged at its clock's target, candidates included (the last phase offers classical)
    assert (episodes[episodes["t"] >= 67]["candidates"] == "classical,cute,chuunibyou").all()
    assert set(episodes["reward"]) <= {0.0, 1.0} and episodes["response"].str.len().gt(0).all()
    assert (episodes.groupby("group_id").size() == 4).all()  # a prompt's num_generations completions
    assert sorted(set(episodes["policy_version"])) == list(range(6))  # TRL's step when it was judged
    updates = read_table(run_dir, "updates")
    assert updates["update"].tolist() == list(range(1, 7)) and updates["trl_loss"].notna().all()
    assert sorted(set(read_table(run_dir, "evals")["t"])) == [0, 32, 64, 96]
    reference = read_table(run_dir, "reference").sort_values("phase")
    assert reference["target_style"].tolist() == ["cute", "chuunibyou", "classical"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["switch_points"] == [38, 67]
    assert manifest["arms"]["trl_grpo"]["0"]["episodes"] == 96

    assert report_main([str(run_dir)]) == 0
    switches = (run_dir / "switches_by_seed.csv").read_text()
    assert "cute,chuunibyou" in switches and "chuunibyou,classical" in switches
    assert (run_dir / "summary.md").read_text().count("trl_grpo") >= 2
    assert any((run_dir / "figures").glob("*.png"))


def test_the_trainer_state_clock_follows_the_step_counter(tmp_path):
    from testbed.integrations.trl import DriftReward, drift_dataset, prompt_text

    session = DriftSession(TINY, tmp_path / "run", arm="trl", overrides=SIZES)
    dataset = drift_dataset(session, 2)  # a prompt is rendered when the trainer reads it, at the clock then
    assert dataset[0]["prompt"][0] == {"role": "system", "content": "styles: academic, cute, chuunibyou."}
    session.env.clock = 80
    assert dataset[0]["prompt"][0] == {"role": "system", "content": "styles: classical, cute, chuunibyou."}
    reward = DriftReward(session, clock="trainer_state", episodes_per_step=16)
    rows = session.prompt_rows(2)
    rewards = reward(
        prompts=[[{"role": "system", "content": "styles: cute, academic."}, {"role": "user", "content": "write."}]] * 2,
        completions=[[{"role": "assistant", "content": "hello there ."}]] * 2,
        trainer_state=SimpleNamespace(global_step=3),
        prompt_id=[r["prompt_id"] for r in rows],
    )
    assert rewards == [0.0, 0.0] and session.clock == 50  # step 3 x 16 episodes: clocks 48 and 49
    assert prompt_text([{"role": "system", "content": "styles: a, b."}, {"role": "user", "content": "write."}]) == (
        "write. styles: a, b."
    )
    with pytest.raises(ValueError, match="needs episodes_per_step"):
        DriftReward(session, clock="trainer_state")(prompts=["p"], completions=["c"])
    session.close()
    episodes = read_table(tmp_path / "run", "episodes")
    assert episodes["t"].tolist() == [48, 49] and episodes["policy_version"].tolist() == [3, 3]
    assert episodes["target_style"].tolist() == ["chuunibyou", "chuunibyou"]  # tiny.yaml's phase 2 at 48
