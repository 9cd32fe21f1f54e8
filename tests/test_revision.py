"""The revision environment: Gymnasium's checker, the editor's notes, multi-segment trajectories
from the real engine (behaviour log-probs exact on action tokens, nothing on observations), the
trainers' view of them, the SFT corpus, and a tiny revision scenario end to end under both
runtimes."""

from __future__ import annotations

import random
from pathlib import Path

import gymnasium
import pandas as pd
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import testbed.envs  # noqa: F401  (registers the env ids)
from judges.rubric import RubricJudge
from testbed.cli.run_command import main
from testbed.engines.hf_engine import HFEngine
from testbed.envs import REVISION_ENV_ID, default_schedule
from testbed.envs.revision import BOILERPLATE, RevisionConfig, RevisionEnv, editor_note, editor_words
from testbed.models.policy import build_policy, token_logprobs_and_routing
from testbed.models.sft import encode_examples
from testbed.models.tokenizer import WordTokenizer
from testbed.runtimes.ray.cluster import start_local
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.store import read_table
from testbed.types import Segment, Trajectory, Verdict
from testbed.world import STYLES, generate, prompts
from trainers.advantages import policy_and_critic_advantages
from trainers.batching import collate
from trainers.losses import PolicyLoss, policy_gradient_loss

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests" / "data" / "tiny_revision.yaml")
TOK = WordTokenizer.build(editor_words(STYLES))


def test_gymnasium_checker_and_a_multi_turn_episode():
    env = gymnasium.make(REVISION_ENV_ID, max_turns=3).unwrapped
    check_env(env, skip_render_check=True)
    env = gymnasium.make(REVISION_ENV_ID, max_turns=3).unwrapped
    prompt, info = env.reset(seed=4)
    assert "styles:" in prompt and env.clock == 0
    note, reward, terminated, _truncated, info = env.step("not a piece at all")
    assert note.startswith("editor:") and reward == 0.0 and not terminated and info["turn"] == 1
    assert env.clock == 0 and env.editor_calls == 1  # the editor's read does not move the clock
    env.step("still not a piece")
    _, reward, terminated, _, info = env.step("and a third try")  # the third draft is the last
    assert terminated and info["turn"] == 3 and env.clock == 1 and reward == 0.0


def test_an_accepted_draft_ends_the_episode():
    env = RevisionEnv(RubricJudge(), default_schedule(), prompts("train"), max_turns=3)
    _, info = env.reset(seed=0)
    target = env.schedule.target(0).style
    good = generate(target, info["topic"], random.Random(0))  # the world's own piece in the target style
    _, reward, terminated, _, info = env.step(good)
    assert terminated and reward == 1.0 and info["turn"] == 1 and env.clock == 1


@pytest.mark.parametrize("feedback", ["informative", "boilerplate"])
def test_notes_never_name_the_target_without_hints(feedback):
    wrong = Verdict(quality=0, style_match=0, style="cute", reasons=("topic", "repeat_span"))
    plain = Verdict(quality=1, style_match=0, style="plain")
    for verdict in (wrong, plain):
        note = editor_note(verdict, "classical", RevisionConfig(feedback=feedback))
        assert "classical" not in note
        hinted = editor_note(verdict, "classical", RevisionConfig(feedback=feedback, hints=True))
        assert ("classical" in hinted) == (feedback == "informative")
    assert editor_note(wrong, "classical", RevisionConfig(feedback="boilerplate")) == BOILERPLATE
    informative = editor_note(wrong, "classical", RevisionConfig())
    assert "off topic" in informative and "repeats itself" in informative and "reads as cute" in informative
    assert editor_note(Verdict(1, 1, "classical"), "classical", RevisionConfig()) is None  # accepted
    assert editor_note(Verdict.failed("timeout"), "classical", RevisionConfig()) is None  # unreadable: stop
    assert TOK.unk_id not in TOK.encode(informative + " " + BOILERPLATE)


def test_engine_continues_a_trajectory_with_exact_behaviour_logprobs():
    torch.manual_seed(0)
    cfg = PolicyConfig(
        hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, top_k=2, expert_size=32
    )
    policy = build_policy(cfg, TOK, seed=0).eval()
    engine = HFEngine(policy, TOK, SamplingConfig(max_new_tokens=12))
    trajs = engine.generate(["write a short piece about tea. styles: cute, classical."] * 3)
    notes = ["editor: it is off topic.", "editor: please revise the piece.", "editor: it is too plain, we want cute."]
    engine.extend(trajs, notes)
    engine.extend(trajs[:1], notes[:1])  # a third draft for the first
    assert [t.turns for t in trajs] == [3, 2, 2]
    for traj, note in zip(trajs, notes):
        kinds = [s.kind for s in traj.segments]
        assert kinds[:3] == ["action", "observation", "action"]
        assert traj.segments[1].tokens == TOK.observation_ids(note) and traj.segments[1].logprobs is None
        assert traj.response_text == TOK.decode(traj.segments[-1].tokens)
        tokens, mask, behaviour = traj.token_layout()
        logprobs, _, _ = token_logprobs_and_routing(
            policy, tokens[None], torch.ones_like(tokens)[None], 1.0, where=mask[None]
        )
        # The sampler saw the whole trajectory as context: its log-probs are the model's own.
        torch.testing.assert_close(logprobs[0][mask], behaviour[mask].float(), atol=2e-4, rtol=1e-4)


def multi_turn(rewards=(0.0, 1.0), turn_rewards=False) -> Trajectory:
    segs = [
        Segment("action", [5, 6, 7], [-1.0, -1.0, -1.0]),
        Segment("observation", [8, 9]),
        Segment("action", [10, 11], [-0.5, -0.5]),
    ]
    return Trajectory(
        prompt_tokens=[1, 2],
        segments=segs,
        verdict=Verdict(int(rewards[-1]), 1, "cute"),
        turn_verdicts=[Verdict(int(rewards[0]), 1, "cute")],
        turn_rewards=turn_rewards,
    )


def test_collate_puts_rewards_on_each_drafts_last_token_only_with_turn_rewards():
    plain = collate([multi_turn((1.0, 1.0))], pad_id=0)
    assert plain.action_mask[0].tolist() == [False, False, True, True, True, False, False, True, True]
    assert plain.rewards[0].tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1.0]
    per_turn = collate([multi_turn((1.0, 1.0), turn_rewards=True)], pad_id=0)
    assert per_turn.rewards[0].tolist() == [0, 0, 0, 0, 1.0, 0, 0, 0, 1.0]
    assert multi_turn().judge_calls() == 2


@pytest.mark.parametrize("mode", ["token", "step_average", "step_last", "naive"])
def test_observation_tokens_get_no_advantage_and_no_loss(mode):
    data = collate([multi_turn(), multi_turn((1.0, 0.0))], pad_id=0)
    values = torch.rand(data.tokens.shape, dtype=torch.float64)
    advantages, _ = policy_and_critic_advantages(data.rewards, values, data.action_mask, 1.0, 0.9, 1.0, mode)
    observation = torch.zeros_like(data.action_mask)
    observation[:, 5:7] = True
    assert (advantages[observation] == 0).all() and (advantages[data.action_mask] != 0).any()
    logprobs = torch.full(data.tokens.shape, -0.7, requires_grad=True)
    dis = PolicyLoss("dis", 0.3, 5.0)
    loss, _ = policy_gradient_loss(logprobs, data.behaviour_logprobs, advantages.float(), data.action_mask, dis)
    loss.backward()
    assert (logprobs.grad[observation] == 0).all() and (logprobs.grad[data.action_mask] != 0).any()


def test_sft_examples_teach_revising_and_never_teach_damaged_drafts():
    examples = RevisionEnv.sft_examples(
        300, ["academic", "cute", "chuunibyou", "classical"], 0, RevisionConfig(max_turns=3)
    )
    revised = [segs for _, segs in examples if len(segs) > 1]
    assert 0.3 < len(revised) / len(examples) < 0.95
    assert all(len([s for s in segs if s[0] == "action"]) <= 3 for _, segs in examples)
    assert all(
        segs[i][0] == "observation" and segs[i][1].startswith("editor:")
        for segs in revised
        for i in range(1, len(segs), 2)
    )
    assert any(not train for _, segs in examples for kind, _, train in segs if kind == "action")  # damaged drafts exist
    _ids, mask, labels = encode_examples(examples[:50], TOK)
    for row, (prompt, segs) in enumerate(examples[:50]):
        at = len(TOK.prompt_ids(prompt))
        for kind, text, train in segs:
            n = len(TOK.encode(text)) + 1  # <eos> after an action, <sep> after an observation
            assert (labels[row, at : at + n] != -100).all() == (kind == "action" and train)
            assert (labels[row, at : at + n] == -100).all() == (kind == "observation" or not train)
            at += n
        assert int(mask[row].sum()) == at


def run_tiny(tmp_path: Path, name: str, *extra: str) -> Path:
    arms = (
        "arms=[{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 32, value_pretrain_epochs: 1, "
        "value_warmup_updates: 1}}, {name: naive, type: sao, args: {episodes_per_update: 16, gae: naive, "
        "value_pretrain_samples: 0}}]"
    )
    code = main(
        [
            TINY,
            "--out",
            str(tmp_path),
            "--run-name",
            name,
            "--set",
            arms,
            "--set",
            "runtime.torch_threads=1",
            "--no-report",
            *extra,
        ]
    )
    assert code == 0
    return tmp_path / name


def test_a_tiny_revision_scenario_end_to_end(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    run = run_tiny(tmp_path, "sync")
    episodes, updates = read_table(run, "episodes"), read_table(run, "updates")
    assert sorted(episodes.groupby("arm")["t"].apply(list).iloc[0]) == list(range(64))
    assert episodes["turns"].between(1, 2).all() and (episodes["turns"] == 2).any()
    # the editor read every draft but a max_turns-th one (k - 1 reads), or accepted the k-th (k reads)
    assert ((episodes["editor_calls"] == episodes["turns"] - 1) | (episodes["editor_calls"] == episodes["turns"])).all()
    revised = episodes[episodes["turns"] == 2]
    assert revised["notes"].str.startswith("editor:").all()
    assert (revised["turn_styles"].str.split(";").str.len() == revised["editor_calls"]).all()
    calls = updates.groupby("arm")["judge_calls"].max()
    assert (calls == (episodes["editor_calls"] + 1).groupby(episodes["arm"]).sum()).all()


def test_the_ray_runtime_runs_the_same_revision_episodes(tmp_path, monkeypatch, shared_cache):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    # the arm with a critic (value pretraining and warm-up on the driver, per-turn values on the learner)
    sao = "{name: sao, type: sao, args: {episodes_per_update: 16, value_pretrain_samples: 32, value_pretrain_epochs: 1, value_warmup_updates: 1}}"
    one_arm = ["--set", "budget.episodes=32", "--set", f"arms=[{sao}]"]
    sync = run_tiny(tmp_path, "sync", *one_arm)
    start_local(num_cpus=2, log_to_driver=False)
    try:
        on_ray = run_tiny(tmp_path, "ray", *one_arm, "--runtime", "ray")
    finally:
        ray.shutdown()
    cols = ["arm", "t", "turns", "editor_calls", "turn_rewards", "notes", "response", "reward"]
    a, b = (read_table(d, "episodes")[cols].sort_values(["arm", "t"]).reset_index(drop=True) for d in (sync, on_ray))
    pd.testing.assert_frame_equal(a, b)


def test_env_settings_are_validated_and_arms_may_override_only_what_keeps_the_sft_policy():
    import yaml

    from testbed.scenario.schema import ScenarioError, parse_scenario

    data = yaml.safe_load(Path(TINY).read_text())
    data["arms"][0]["env"] = {"feedback": "boilerplate"}
    scenario = parse_scenario(data, "tiny")
    assert scenario.env_for(scenario.arms[0]).settings().feedback == "boilerplate"
    assert scenario.env_for(scenario.arms[1]).settings().feedback == "informative"
    for bad, says in [
        ({"arms": {"env": {"max_turns": 3}}}, "would change what the shared SFT policy learns"),
        ({"arms": {"env": {"feedbak": 1}}}, "arms.0.env.feedbak: unknown key"),
        ({"env": {"type": "revision", "args": {"feedback": "loud"}}}, "env.args.feedback"),
        (
            {"env": {"type": "style_shift", "args": {"max_turns": 2}}},
            "env.args.max_turns: not an argument of StyleShiftEnv",
        ),
        ({"env": {"type": "nowhere"}}, "unknown env 'nowhere'"),
    ]:
        broken = yaml.safe_load(Path(TINY).read_text())
        if "arms" in bad:
            broken["arms"][0]["env"] = bad["arms"]["env"]
        else:
            broken["env"] = bad["env"]
        with pytest.raises(ScenarioError, match=says):
            parse_scenario(broken, "tiny")
