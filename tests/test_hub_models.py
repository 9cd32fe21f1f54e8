"""Hub-format checkpoints: the project's SFT policy exported by `testbed.models.export` runs exactly
as the built one (the same log-probs, the same rows), and a second MoE family with its own BPE
tokenizer (testbed/models/tiny_hub.py) runs end to end with SAO, its critic's attention frozen bit
for bit, and with GRPO."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from testbed.cli.export import main as export_main
from testbed.cli.run_command import main as run_main
from testbed.models.hub import load_checkpoint
from testbed.models.policy import token_logprobs
from testbed.runtimes.starting import scenario_policy
from testbed.scenario.schema import load_scenario
from testbed.store import read_table
from testbed.world import prompts, render_prompt

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests/data/tiny.yaml")
# One seed, one switch inside the budget, two evaluations: a short run that still moves the policy.
SHORT = ["--set", "seeds=[0]", "--set", "budget.episodes=48", "--set", "eval.every=32", "--set", "eval.prompts=8"]


class ShortIsStyled:
    """A judge for the barely trained second family (the rubric fails all its text): quality 1,
    the target style for a response of at most 12 words, so rewards vary from sample to sample."""

    def score(self, request):
        # the reference policy's prompts offer the target alone: "plain" is then the other style
        other = next((s for s in request.candidate_styles if s != request.target_style), "plain")
        return {"quality": 1, "style": request.target_style if len(request.response.split()) <= 12 else other}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared_cache):
    """tiny.yaml's SFT policy (the shared cache's) exported through the CLI."""
    directory = tmp_path_factory.mktemp("exported") / "tiny-sft"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TESTBED_CACHE", str(shared_cache))
        assert export_main([str(directory), "--scenario", TINY]) == 0
        model, tok, _ = scenario_policy(load_scenario(TINY), 0, log=lambda _: None)
    return directory, model, tok


@pytest.fixture(scope="module")
def second_family(shared_cache):
    from testbed.models.tiny_hub import tiny_hub_checkpoint

    return tiny_hub_checkpoint(shared_cache)


def test_exported_checkpoint_gives_the_in_memory_policys_ids_and_logprobs(exported):
    directory, model, tok = exported
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    } <= {p.name for p in directory.iterdir()}
    hub_model, hub_tok, report = load_checkpoint(directory)
    assert type(hub_tok).__name__ == "HubTokenizer" and report["family"] == "qwen3_moe" and report["chat_template"]
    texts = [
        render_prompt(spec, cands)
        for spec in prompts("train")[:40]
        for cands in (["cute"], ["academic", "cute", "chuunibyou"], ["classical", "cute", "chuunibyou", "plain"])
    ]
    assert all(hub_tok.prompt_ids(t) == tok.prompt_ids(t) for t in texts)  # the chat template: <bos> prompt <sep>
    assert hub_tok.observation_ids("cute , please .") == tok.observation_ids("cute , please .")
    assert hub_tok.stop_ids == (tok.eos_id,) and hub_tok.pad_id == tok.pad_id

    from testbed.engines.hf_engine import HFEngine
    from testbed.scenario.schema import SamplingConfig

    torch.manual_seed(0)
    trajs = HFEngine(model, tok, SamplingConfig(max_new_tokens=24)).generate(texts[:24])
    assert all(hub_tok.decode(t.response_tokens) == t.response_text for t in trajs)  # the tokenizer's own decoder
    width = max(len(t.prompt_tokens) + len(t.response_tokens) for t in trajs)
    ids = torch.full((len(trajs), width), tok.pad_id)
    mask = torch.zeros_like(ids)
    for row, t in enumerate(trajs):
        seq = t.prompt_tokens + t.response_tokens
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.tensor(seq), 1
    mine, _ = token_logprobs(model, ids, mask)
    theirs, _ = token_logprobs(hub_model, ids, mask)
    assert (mine - theirs).abs().max().item() == 0.0  # bit for bit
    assert mine[mask.bool()].sum() < 0  # real log-probs, not a row of zeros


def test_a_run_on_the_exported_checkpoint_writes_the_built_policys_rows(exported, tmp_path, monkeypatch, shared_cache):
    directory, _, _ = exported
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    assert run_main([TINY, "--out", str(tmp_path), "--run-name", "built", "--no-report", *SHORT]) == 0
    assert (
        run_main(
            [
                TINY,
                "--out",
                str(tmp_path),
                "--run-name",
                "hub",
                "--no-report",
                *SHORT,
                "--set",
                f"policy.checkpoint={directory}",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "hub" / "manifest.json").read_text())["sft"]["family"] == "qwen3_moe"
    for table, keys in (("episodes", ["t"]), ("updates", ["update"]), ("evals", ["t", "style"])):
        built = read_table(tmp_path / "built", table).sort_values(keys).reset_index(drop=True)
        hub = read_table(tmp_path / "hub", table).sort_values(keys).reset_index(drop=True)
        columns = [c for c in built.columns if c not in ("judge_latency_s",)]  # a timing, not a result
        assert len(built) > 0
        pd.testing.assert_frame_equal(hub[columns], built[columns], check_exact=True, obj=table)
    episodes = read_table(tmp_path / "built", "episodes")
    assert episodes["reward"].sum() > 0 and episodes["response"].str.len().min() > 0


def test_second_family_with_its_bpe_tokenizer_runs_sao_and_grpo(
    second_family, tmp_path, monkeypatch, shared_cache, capsys
):
    monkeypatch.setenv("TESTBED_CACHE", str(shared_cache))
    arms = (
        "[{name: sao, type: sao, args: {episodes_per_update: 8, value_pretrain_samples: 16, value_pretrain_epochs: 2, "
        "value_warmup_updates: 1, critic_lr: 0.01, policy_lr: 0.001}}, "
        "{name: grpo, type: grpo, args: {group_size: 2, episodes_per_update: 8, lr: 0.001}}]"
    )
    code = run_main(
        [
            TINY,
            "--out",
            str(tmp_path),
            "--run-name",
            "qwen2",
            "--no-report",
            "--set",
            "seeds=[0]",
            "--set",
            "budget.episodes=32",
            "--set",
            "eval.every=32",
            "--set",
            "eval.prompts=8",
            "--set",
            f"policy.checkpoint={second_family}",
            "--set",
            "judge={type: 'tests.test_hub_models:ShortIsStyled'}",
            "--set",
            f"arms={arms}",
        ]
    )
    assert code == 0
    run_dir = tmp_path / "qwen2"
    episodes = read_table(run_dir, "episodes")
    for arm in ("sao", "grpo"):
        mine = episodes[episodes.arm == arm]
        assert sorted(mine["t"]) == list(range(32)) and mine["reward"].nunique() == 2
    model, tok, _ = load_checkpoint(second_family)
    assert tok.vocab_size == 1024 and tok.stop_ids[0] == tok.hf.convert_tokens_to_ids("<|im_end|>")

    initial = model.state_dict()  # as loaded (the file may keep the experts in the Hub's per-expert layout)
    sao = torch.load(run_dir / "checkpoints" / "sao-seed0" / "final.pt", weights_only=False)["trainer"]
    critic = {k.removeprefix("backbone."): v for k, v in sao["critic"].items() if k.startswith("backbone.")}
    attention = [k for k in critic if ".self_attn." in k]
    moe = [k for k in critic if ".mlp." in k]
    assert any(k.endswith("q_proj.bias") for k in attention) and any(".shared_expert_gate." in k for k in moe)
    for name in attention:
        assert torch.equal(critic[name], initial[f"model.{name}"]), name  # frozen: bit for bit
    assert all(not torch.equal(critic[k], initial[f"model.{k}"]) for k in moe)  # router, experts, shared expert learn
    for state in (sao, torch.load(run_dir / "checkpoints" / "grpo-seed0" / "final.pt", weights_only=False)["trainer"]):
        assert any(not torch.equal(v, initial[k]) for k, v in state["policy"].items())  # the policy moved

    split = json.loads((run_dir / "manifest.json").read_text())["arms"]["sao"]["0"]["parameters"]
    assert "trainable_attention" not in split and split["total_attention"] > 0
    assert split["trainable_experts"] == split["total_experts"] and split["trainable_router"] == split["total_router"]
    assert split["trainable_head"] == 32 + 1  # the value head over a hidden size of 32
    out = capsys.readouterr()
    assert "sao seed 0: trainable parameters" in out.out + out.err


def test_bad_checkpoints_are_named_with_their_path(second_family, tmp_path):
    import shutil

    from testbed.scenario.schema import ScenarioError

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=f"{empty} has no config.json"):
        load_checkpoint(empty)
    with pytest.raises(ScenarioError, match=r"policy\.checkpoint.*no such directory: /no/such/model"):
        load_scenario(TINY, ["policy.checkpoint=/no/such/model"])

    bare = tmp_path / "no-tokenizer"
    shutil.copytree(second_family, bare, ignore=shutil.ignore_patterns("tokenizer*", "chat_template*"))
    with pytest.raises(FileNotFoundError, match=f"{bare} has no tokenizer"):
        load_checkpoint(bare)

    no_eos = tmp_path / "no-eos"
    shutil.copytree(second_family, no_eos, ignore=shutil.ignore_patterns("generation_config.json"))
    config = json.loads((no_eos / "tokenizer_config.json").read_text())
    config.pop("eos_token", None)
    (no_eos / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"{no_eos}.*no eos token"):
        load_checkpoint(no_eos)


def test_prompts_put_the_candidate_styles_in_the_system_message(second_family):
    from testbed.models.hub_tokenizer import chat_messages

    prompt = render_prompt(prompts("train")[0], ["cute", "classical"])
    assert chat_messages(prompt) == [
        {"role": "system", "content": "styles: cute, classical."},
        {"role": "user", "content": prompts("train")[0].request},
    ]
    assert chat_messages("no list here.") == [{"role": "user", "content": "no list here."}]
    tok = load_checkpoint(second_family)[1]
    rendered = tok.hf.decode(tok.prompt_ids(prompt))
    assert rendered.startswith("<|im_start|>system\nstyles: cute, classical.<|im_end|>") and rendered.endswith(
        "assistant\n"
    )
    # between two drafts: the draft's <|im_end|> is already there, then a user turn and the next assistant prompt
    assert (
        tok.hf.decode(tok.observation_ids("more, please."))
        == "\n<|im_start|>user\nmore, please.<|im_end|>\n<|im_start|>assistant\n"
    )
