"""`python -m testbed.run SCENARIO --dry-run`: the plan, printed or as JSON, with nothing trained and
nothing written; its judge-call estimate by hand and against the calls a real tiny run counts."""

import json
from pathlib import Path

import pytest

import testbed.cli.run_command as cli
from testbed.cli.plan_arithmetic import ArmShape, active_parameters, evaluations, judge_calls, public_args
from testbed.models import sft
from testbed.runtimes.starting import starting_policies
from tests.test_bad_input import ROWS, command_line

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = str(ROOT / "scenarios" / "style_shift.yaml")


def no_training(*args, **kwargs):
    raise AssertionError("a dry run started training")


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A working directory and a cache with one file in it, to see that neither changes."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "kept.txt").write_text("x")
    monkeypatch.setenv("TESTBED_CACHE", str(cache))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sft, "load_or_train_policy", no_training)
    return tmp_path


def snapshot(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def dry(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main([*args, "--dry-run"])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- the arithmetic, by hand ----------------------------------------------------------------------


def test_judge_calls_equal_a_hand_computed_case():
    # budget 100, eval every 40 on 16 prompts, 2 seeds, the gold judge on every episode.
    # arm a: rounds of 32 at clocks 0, 32, 64, 96 -> evaluations at 0, 64, 96 and the end = 4
    # arm b: rounds of 24 at clocks 0, 24, 48, 72, 96 -> at 0, 48, 96 and the end = 4
    arms = [ArmShape("a", 32, warmup_runs=1, warmup_samples=50), ArmShape("b", 24)]
    calls = judge_calls(100, 2, arms, eval_every=40, eval_prompts=16, gold_share=1.0)
    assert calls["by_arm"]["a"]["eval"] == {"min": 4 * 16 * 2, "max": 128}
    assert calls["training"] == {"min": 400, "max": 400}
    assert calls["eval"]["max"] == 256 and calls["warmup"]["max"] == 50 and calls["gold"]["max"] == 400
    assert calls["total"] == {"min": 1106, "max": 1106}


def test_multi_turn_episodes_cost_one_to_max_turns_calls_and_gold_scores_the_last_draft():
    calls = judge_calls(20, 1, [ArmShape("c", 10, max_turns=3)], eval_every=100, eval_prompts=4, gold_share=1.0)
    # evaluations at clock 0 and at the end: 2 x 4 held-out episodes
    assert calls["training"] == {"min": 20, "max": 60} and calls["eval"] == {"min": 8, "max": 24}
    assert calls["gold"] == {"min": 20, "max": 20} and calls["total"] == {"min": 48, "max": 104}


def test_evaluations_when_a_round_is_longer_than_the_interval():
    # rounds of 64: clocks 0 (due 0 -> 20) and 64 (due 20 -> 40), then the end: 3, not 100 / 20 + 1
    assert evaluations(100, 64, 20) == 3
    assert evaluations(160, 16, 64) == 4  # tests/test_end_to_end.py finds evaluations at 0, 64, 128, 160


def test_active_parameters_count_top_k_of_the_routed_experts_and_every_shared_one():
    sizes = {"embed": 10, "layers.0.attn.q": 6, "layers.0.mlp.experts.w": 80, "layers.0.mlp.shared_expert.w": 4}
    assert active_parameters(sizes, num_experts=8, top_k=2) == 10 + 6 + 80 * 2 // 8 + 4
    assert active_parameters(sizes, None, None) == 100


def test_public_args_hide_secrets_and_show_env_var_names(monkeypatch):
    monkeypatch.setenv("DRY_KEY_SET", "sk-1")
    monkeypatch.delenv("DRY_KEY_UNSET", raising=False)
    shown = public_args(
        {
            "api_key_env": "DRY_KEY_SET",
            "token_env": "DRY_KEY_UNSET",
            "extra_params": {"api_key": "sk-2"},
            "api_base": "https://user:pw@host/v1",
            "max_tokens": 64,
        }
    )
    assert shown == {
        "api_key_env": {"env_var": "DRY_KEY_SET", "set": True},
        "token_env": {"env_var": "DRY_KEY_UNSET", "set": False},
        "extra_params": {"api_key": "<hidden>"},
        "api_base": "https://user:<hidden>@host/v1",
        "max_tokens": 64,
    }


# -- the CLI ----------------------------------------------------------------------------------------


def test_a_schedule_in_simulated_seconds_is_planned_in_seconds(isolated, capsys):
    code, raw, err = dry(capsys, str(ROOT / "scenarios" / "cluster_shift.yaml"), "--json")
    assert code == 0, err
    schedule = json.loads(raw)["schedule"]
    # 0.4 and 0.7 of horizon_s = 134 s, rounded to whole seconds: the same for every arm
    assert schedule["unit"] == "simulated seconds" and schedule["switch_points"] == [54, 94]
    assert [(p["start"], p["end"]) for p in schedule["phases"]] == [(0, 54), (54, 94), (94, 134)]


def test_the_default_scenario_prints_its_plan_and_writes_nothing(isolated, capsys):
    before = snapshot(isolated)
    code, table, err = dry(capsys, DEFAULT, "--out", str(isolated / "runs"))
    assert code == 0, err
    code, raw, _ = dry(capsys, DEFAULT, "--out", str(isolated / "runs"), "--json")
    assert code == 0
    assert snapshot(isolated) == before  # no run directory, the cache as it was
    plan = json.loads(raw)
    said = " ".join(table.split())
    for part in ("Models", "Judges and world", "Schedule", "Arms", "Runtime, episodes and judge calls"):
        assert part in said
    # what the table says is what the JSON holds, and the JSON holds what the scenario implies
    assert f"{plan['policy']['parameters']:,} total" in said and f"{plan['judge_calls']['total']['max']:,}" in said
    assert [a["name"] for a in plan["arms"]] == ["sao", "running_mean", "grpo"] and plan["seeds"] == [0, 1, 2, 3, 4]
    assert plan["schedule"]["switch_points"] == [2400, 4200] and [p["style"] for p in plan["schedule"]["phases"]] == [
        "cute",
        "chuunibyou",
        "classical",
    ]
    assert plan["episodes"]["total"] == 6000 * 3 * 5 == plan["judge_calls"]["training"]["max"]
    assert plan["runtime"]["parallel_arms"] and plan["runtime"]["ray"]
    sao = plan["arms"][0]
    assert (
        sao["critic"]["frozen"] > 0 and sao["critic"]["trainable"] + sao["critic"]["frozen"] == sao["critic"]["total"]
    )
    assert "trainable_attention" not in sao["critic"]  # SAO's default critic freezes its attention
    assert plan["arms"][1]["critic"] is None and all(a["reference"]["kl_coef"] == 0.2 for a in plan["arms"])
    # per-seed SFT and a cold cache: five policies and five critic warm-ups would be computed
    assert len(plan["starting_policies"]) == 5 and not any(s["cached"] for s in plan["starting_policies"])
    assert sao["warmup"]["runs"] == 5 and plan["judge_calls"]["warmup"]["max"] == 5 * sao["warmup"]["samples"]


def test_the_plan_counts_the_parameters_of_the_policy_a_run_builds(isolated, capsys):
    from testbed.models.policy import build_policy, count_parameters
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import load_scenario

    code, raw, err = dry(capsys, DEFAULT, "--json", "--set", "policy.num_experts=4", "--set", "policy.top_k=1")
    assert code == 0, err
    plan = json.loads(raw)
    built = build_policy(
        load_scenario(DEFAULT, ["policy.num_experts=4", "policy.top_k=1"]).policy, WordTokenizer.build()
    )
    assert plan["policy"]["parameters"] == count_parameters(built)
    experts = sum(p.numel() for n, p in built.named_parameters() if ".mlp.experts." in n)
    assert plan["policy"]["active_parameters"] == count_parameters(built) - experts + experts // 4


BAD_ROWS = [row for row in ROWS if "--resume" not in row[1]]


@pytest.mark.parametrize("what,command,message", BAD_ROWS, ids=[row[0] for row in BAD_ROWS])
def test_every_bad_input_of_the_readme_fails_the_dry_run_with_its_error(
    what, command, message, capsys, monkeypatch, tmp_path
):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sft, "load_or_train_policy", no_training)
    assert cli.main([*command_line(command, tmp_path), "--dry-run"]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "override,message",
    [
        ("policy.checkpoint=/nonexistent/model", "policy.checkpoint: no such directory: /nonexistent/model"),
        (
            "judge={type: llm, args: {model: openai/x, concurrency: 0}}",
            "judge.args.concurrency: Input should be greater than or equal to 1",
        ),
        (
            "gold_judge={type: llm, args: {modle: openai/x}}",
            "gold_judge.args.modle: unknown key 'modle' (did you mean 'model'?)",
        ),
        # a judge plugin with a bug fails at its first call: the dry run makes that call on a sample
        (
            "judge={type: 'tests.test_judge_plugin_run:key_error_judge'}",
            "judge tests.test_judge_plugin_run:key_error_judge: the judge fails on a sample request",
        ),
    ],
)
def test_what_a_run_finds_only_later_fails_the_dry_run_with_the_field_named(isolated, capsys, override, message):
    code, _, err = dry(capsys, DEFAULT, "--set", override)
    assert code == 2 and message in " ".join(err.split())


def test_a_secret_in_an_env_var_never_appears_and_no_llm_judge_is_started(isolated, capsys, monkeypatch):
    secret = "sk-dry-run-7f3a9c1e5b"
    monkeypatch.setenv("DRY_RUN_JUDGE_KEY", secret)
    monkeypatch.setenv("DRY_RUN_SERVER_TOKEN", secret + "-server")
    judge = "judge={type: llm, args: {model: openai/glm-4.7, api_base: 'http://127.0.0.1:9/v1', api_key_env: DRY_RUN_JUDGE_KEY}}"
    gold = "gold_judge={type: llm, args: {model: openai/x, local_server: {judge: rubric, token_env: DRY_RUN_SERVER_TOKEN}}}"
    before = snapshot(isolated)
    outputs = []
    for extra in ([], ["--json"]):
        code, out, err = dry(capsys, DEFAULT, "--set", judge, "--set", gold, *extra)
        assert code == 0, err
        outputs.append(out + err)
    assert not any(secret in text for text in outputs)
    assert "$DRY_RUN_JUDGE_KEY (set)" in " ".join(outputs[0].split())
    plan = json.loads(outputs[1])
    assert plan["judge"]["args"]["api_key_env"] == {"env_var": "DRY_RUN_JUDGE_KEY", "set": True}
    assert plan["judge"]["check"] == plan["gold_judge"]["check"] == "checked"  # not built: no server, no verdict cache
    assert snapshot(isolated) == before


def test_an_unset_key_is_a_warning_of_the_dry_run_not_an_error(isolated, capsys, monkeypatch):
    monkeypatch.delenv("DRY_RUN_MISSING_KEY", raising=False)
    judge = "judge={type: llm, args: {model: openai/x, api_base: 'http://127.0.0.1:9/v1', api_key_env: DRY_RUN_MISSING_KEY}}"
    code, out, _ = dry(capsys, DEFAULT, "--set", judge)
    assert code == 0
    assert "the environment variable DRY_RUN_MISSING_KEY is not set; a real run stops at start-up" in " ".join(
        out.split()
    )


def test_dry_run_refuses_resume_and_json_needs_it(capsys):
    assert cli.main(["--resume", "tests/data", "--dry-run"]) == 2
    assert cli.main([DEFAULT, "--json"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--dry-run plans a new run" in err and "--json goes with --dry-run" in err


# -- the estimate against a real run ----------------------------------------------------------------

TINY = [
    "--set",
    "budget.episodes=40",
    "--set",
    "eval.every=16",
    "--set",
    "eval.prompts=4",
    "--set",
    "seeds=[0]",
    "--set",
    "policy.sft.steps=10",
    "--set",
    "policy.sft.eval_samples=8",
    "--set",
    "gold_judge={type: rubric, share: 0.5}",
    "--set",
    "arms=[{name: sao, type: sao, args: {episodes_per_update: 8, value_pretrain_samples: 12, value_pretrain_epochs: 1}},"
    " {name: grpo, type: grpo, args: {group_size: 4, episodes_per_update: 12}}]",
]


def test_the_estimate_equals_the_judge_calls_a_real_tiny_run_counts(tmp_path, monkeypatch, capsys):
    from testbed.store import read_table

    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path / "cache"))  # cold: the critic's warm-up runs and is counted
    scenario = str(ROOT / "tests" / "data" / "tiny.yaml")
    assert cli.main([scenario, *TINY, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["arms"][0]["warmup"]["runs"] == 1 and plan["judge_calls"]["gold"]["max"] > 0
    # the run's own start-up and arms (run_scenario without its closing report, which takes longer than the run)
    opened: dict = {}
    assert (
        cli.start(cli.parse_arguments([scenario, *TINY, "--out", str(tmp_path / "runs"), "--run-name", "tiny"]), opened)
        is None
    )
    try:
        starts = starting_policies(opened["scenario"])
        cli.run_arms(
            opened["scenario"],
            opened["store"],
            opened["manifest"],
            None,
            starts=starts,
            judge=opened["judge"],
            schedule=opened["schedule"],
        )
        opened["store"].flush()
    finally:
        cli.close(opened)
    run = tmp_path / "runs" / "tiny"
    manifest = json.loads((run / "manifest.json").read_text())
    episodes = read_table(run, "episodes")
    for arm, estimate in plan["judge_calls"]["by_arm"].items():
        totals = manifest["arms"][arm]["0"]
        measured = {
            "training": totals["judge_calls"],
            "eval": totals["eval_judge_calls"],
            "warmup": totals["pretrain"].get("judge_calls", 0),
            "gold": int(episodes[episodes.arm == arm]["gold_reward"].notna().sum()),
        }
        assert measured == {kind: calls["max"] for kind, calls in estimate.items()}, arm
        assert all(calls["min"] == calls["max"] for calls in estimate.values())  # single-turn: exact
    print(f"estimate {plan['judge_calls']['total']['max']} judge calls; measured in {run}")


def test_the_sweep_dry_run_counts_the_judge_calls_of_each_points_own_arms(isolated, capsys):
    from testbed.cli import sweep_command as sweep

    assert cli.main([DEFAULT, "--dry-run", "--json", "--set", "seeds=[0]"]) == 0
    by_arm = json.loads(capsys.readouterr().out)["judge_calls"]["by_arm"]
    assert sweep.main([DEFAULT, "--grid", "arms.running_mean.args.window=16,128", "--seeds", "0", "--dry-run"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    every = sum(c["max"] for calls in by_arm.values() for c in calls.values())
    window = sum(c["max"] for c in by_arm["running_mean"].values())  # p01 runs the running mean alone
    assert f"p00 arms.running_mean.args.window=16: runs sao, running_mean, grpo; ~{every:,} judge calls" in said
    assert (
        f"p01 arms.running_mean.args.window=128: runs running_mean; reuses sao from p00, grpo from p00; ~{window:,}"
        in said
    )
    assert f"in all: ~{every + window:,}" in said
    assert not (isolated / "work" / "runs").exists()
