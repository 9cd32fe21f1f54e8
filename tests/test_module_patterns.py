"""The MoE parts by module-name patterns: the defaults fit the families transformers ships, a
family named otherwise is refused with a pointer to the override, and the override works."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from testbed.models.critic import Critic
from testbed.models.modules import ATTENTION, EXPERTS, HEAD, ROUTER, ModulePatterns, module_family, parameter_split
from testbed.scenario.schema import ScenarioError, load_scenario

SMALL = dict(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=32,
    moe_intermediate_size=16,
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
    max_position_embeddings=64,
    head_dim=16,
    kv_lora_rank=8,
    q_lora_rank=8,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    first_k_dense_replace=0,
    shared_expert_intermediate_size=16,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
JETMOE = ModulePatterns(
    attention=[r"\.self_attention\."],
    router=[r"\.mlp\.router\."],
    experts=[r"\.mlp\.(input_linear\.|output_linear\.|bias$)"],
)


def tiny(model_type: str) -> torch.nn.Module:
    config = AutoConfig.for_model(model_type)
    for key, value in SMALL.items():
        if hasattr(config, key):
            setattr(config, key, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize(
    "model_type", ["qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "deepseek_v3", "gpt_oss", "granitemoe", "phimoe"]
)
def test_default_patterns_find_every_part_of_the_shipped_families(model_type):
    model = tiny(model_type)
    split = parameter_split(model)
    assert split["total_attention"] > 0 and split["total_router"] > 0 and split["total_experts"] > 0
    for name, _ in model.named_parameters():
        if ".layers." in name and module_family(name) == "other":
            assert "norm" in name, name  # inside a block, only the norms are none of the three


def test_the_qwen_names_keep_their_parts():
    assert module_family("model.layers.0.self_attn.q_proj.weight") == ATTENTION
    assert module_family("model.layers.0.mlp.shared_expert_gate.weight") == ROUTER  # gates the shared expert
    assert module_family("model.layers.0.mlp.shared_expert.up_proj.weight") == EXPERTS
    assert module_family("value_head.weight") == HEAD and module_family("lm_head.weight") == "other"


def test_a_family_named_otherwise_is_refused_then_runs_with_the_override():
    model = tiny("jetmoe")
    with pytest.raises(ValueError, match="jetmoe.*attention / experts patterns.*critic_module_patterns"):
        Critic.from_policy(model, "moe")
    critic = Critic.from_policy(model, "moe", patterns=JETMOE)
    frozen = [n for n, p in critic.named_parameters() if not p.requires_grad]
    assert frozen and all(".self_attention." in n or "embed" in n or "norm" in n for n in frozen)
    split = parameter_split(critic, JETMOE)
    assert "trainable_attention" not in split and split["trainable_experts"] == split["total_experts"] > 0

    from trainers.sao import SAOTrainer

    trainer = SAOTrainer(model, {"critic_module_patterns": JETMOE.model_dump()}, pad_id=0)
    assert trainer.parameter_counts == split
    assert trainer.warmup_key()["critic_module_patterns"]["attention"] == [r"\.self_attention\."]


def test_the_override_is_validated_when_the_scenario_loads():
    base = "tests/data/tiny.yaml"
    sao = (
        "arms=[{name: sao, type: sao, args: {critic_module_patterns: {attention: ['(['], router: [x], experts: [y]}}}]"
    )
    with pytest.raises(
        ScenarioError, match=r"arms\.0\.args\.critic_module_patterns\.attention.*not a regular expression"
    ):
        load_scenario(base, [sao])
    with pytest.raises(ScenarioError, match=r"critic_module_patterns.*router"):
        load_scenario(
            base, ["arms=[{name: sao, type: sao, args: {critic_module_patterns: {attention: [a], experts: [b]}}}]"]
        )
    assert load_scenario(base, [sao.replace("'(['", "a")]).arms[0].args["critic_module_patterns"]["attention"] == ["a"]


def test_a_family_that_rescales_its_logits_after_the_head_is_refused():
    from pathlib import Path

    from testbed.models.hub import check_scoring
    from testbed.models.policy import token_logprobs

    model = tiny("granitemoe")
    check_scoring(model, Path("granite"))  # scaling 1: nothing to repeat
    model.config.logits_scaling = 8.0
    ids = torch.randint(3, 96, (1, 6))
    full = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    assert not torch.allclose(
        full, token_logprobs(model, ids, torch.ones_like(ids))[0][0, 1:], atol=1e-3
    )  # they differ
    with pytest.raises(ValueError, match=r"granite: granitemoe transforms its logits \(logits_scaling=8.0\)"):
        check_scoring(model, Path("granite"))
