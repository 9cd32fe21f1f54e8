"""`python -m analysis.rescore RUN_DIR --judge ...`: a run's stored responses judged again (the
judging in testbed/cli/rescore.py, its own process), then the agreement and the reward the run
would have had (analysis/rescore.py). The training judge itself must give every reward back; a
judge with fewer checks can only grant more."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.rescore import agreement_by_seed, cohen_kappa, main, summarise


def test_cohen_kappa_by_hand():
    # observed 3/4; expected 1/2 x 1/4 + 1/2 x 3/4 = 1/2; kappa (3/4 - 1/2) / (1 - 1/2) = 1/2
    assert cohen_kappa(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])) == pytest.approx(0.5)
    assert cohen_kappa(np.array([1, 0, 1]), np.array([1, 0, 1])) == pytest.approx(1.0)
    assert np.isnan(cohen_kappa(np.array([1, 1]), np.array([1, 1])))  # one value each: no chance level


def test_agreement_per_seed_and_phase_by_hand():
    rescored = pd.DataFrame(
        {
            "arm": ["a"] * 4,
            "seed": [0] * 4,
            "t": [0, 1, 2, 3],
            "reward": [1.0, 1.0, 0.0, 1.0],
            "quality": [1, 1, 0, 1],
            "style": ["cute"] * 4,
            "rescored_reward": [1.0, 0.0, 0.0, None],
            "rescored_quality": [1, 0, 0, None],
            "rescored_style": ["cute", "cute", "plain", None],
            "rescored_error": [None, None, None, "down"],
        }
    )
    by_seed = agreement_by_seed(rescored, [2], 4).set_index("phase")
    whole = by_seed.loc["all"]
    assert (whole["episodes"], whole["failed"]) == (3, 1)
    assert whole["reward"] == pytest.approx(2 / 3) and whole["rescored"] == pytest.approx(1 / 3)
    assert whole["gap"] == pytest.approx(1 / 3) and whole["agreement"] == pytest.approx(2 / 3)
    assert whole["style_agreement"] == pytest.approx(2 / 3)
    assert by_seed.loc["0", "gap"] == pytest.approx(0.5) and by_seed.loc["1", "episodes"] == 1
    summary = summarise(by_seed.reset_index())
    assert set(summary["phase"]) == {"all", "0", "1"} and (summary["seeds"] == 1).all()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, shared_cache):
    from testbed.cli.run_command import main as run_main

    out = tmp_path_factory.mktemp("rescore")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESTBED_CACHE", str(shared_cache))
        sizes = ["--set", "seeds=[0]", "--set", "budget.episodes=64", "--set", "eval.every=64"]
        assert run_main(["tests/data/tiny.yaml", "--out", str(out), "--no-report", *sizes]) == 0
    (run_dir,) = out.iterdir()
    return run_dir


def test_the_training_judge_gives_every_reward_back(tiny_run):
    assert main([str(tiny_run), "--judge", "rubric", "--name", "same"]) == 0
    rescored = pd.read_parquet(tiny_run / "rescored" / "same.parquet")
    assert len(rescored) == 64 and rescored["rescored_error"].isna().all()
    assert (rescored["rescored_reward"] == rescored["reward"]).all()
    assert (rescored["rescored_style"] == rescored["style"]).all()
    summary = pd.read_csv(tiny_run / "rescore-same" / "agreement.csv")
    assert (summary["agreement"] == 1.0).all() and (summary["gap"] == 0.0).all()
    assert json.loads((tiny_run / "rescored" / "same.json").read_text())["episodes"] == 64


def test_a_lenient_judge_grants_at_least_as_much_and_the_gap_says_how_much(tiny_run, capsys):
    lenient = json.dumps({"checks": ["length", "ending"], "dominance": 0.0})
    assert main([str(tiny_run), "--judge", "rubric", "--judge-args", lenient, "--name", "lenient"]) == 0
    rescored = pd.read_parquet(tiny_run / "rescored" / "lenient.parquet")
    assert (rescored["rescored_reward"] >= rescored["reward"]).all()  # fewer checks, any top style
    whole = pd.read_csv(tiny_run / "rescore-lenient" / "agreement.csv").set_index("phase").loc["all"]
    assert whole["gap"] == pytest.approx(rescored["reward"].mean() - rescored["rescored_reward"].mean())
    assert whole["gap"] < 0  # the run would have earned more under the lenient judge
    assert "judged again by lenient" in capsys.readouterr().out
    # stored verdicts are read, not judged again, unless asked
    (tiny_run / "rescored" / "lenient.json").write_text(json.dumps({"judge": "marker"}))
    assert main([str(tiny_run), "--judge", "rubric", "--name", "lenient"]) == 0
    assert json.loads((tiny_run / "rescored" / "lenient.json").read_text()) == {"judge": "marker"}


def test_bad_input_is_named(tiny_run, tmp_path, capsys):
    from testbed.cli.rescore import main as judging

    assert judging([str(tmp_path / "nowhere"), "--judge", "rubric"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert judging([str(tiny_run), "--judge", "no_such_judge"]) == 2
    assert "no_such_judge" in capsys.readouterr().err
    assert judging([str(tiny_run), "--judge", "rubric", "--share", "0"]) == 2
    assert "--share 0.0: must be in (0, 1]" in capsys.readouterr().err
