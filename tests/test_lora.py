"""LoRA through PEFT (`policy.lora`, SAO's `critic_trainable: lora`): the reference is the base with
the adapters off, exactly; merged weights are PEFT's own merge; training moves the adapters and
nothing else; the critic's adapters sit on the experts alone."""

import copy

import pytest
import torch

from testbed.models.critic import ATTENTION, EXPERTS, ROUTER, module_family
from testbed.models.lora import attach, has_adapters, merge_plan, merged_state, merged_weights, split_targets
from testbed.models.policy import build_policy, token_logprobs
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.lora import LoraSettings
from testbed.scenario.schema import PolicyConfig
from testbed.types import Verdict
from trainers.batching import collate
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

pytest.importorskip("peft")

TOK = WordTokenizer.build()
SMALL = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16)
LORA = LoraSettings(r=4, alpha=8)


def lora_policy(settings=LORA, seed=0):
    base = build_policy(SMALL, TOK, seed=seed)
    return base, attach(copy.deepcopy(base), settings)


def scramble_adapters(model, seed=1):
    """Non-zero adapters (fresh ones have B = 0 and change nothing)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


def batch(n=6, length=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, TOK.vocab_size, (n, length), generator=gen)
    mask = torch.ones_like(tokens)
    where = torch.zeros_like(tokens, dtype=torch.bool)
    where[:, 6:] = True
    return tokens, mask, where


def test_targets_split_into_linear_modules_and_fused_expert_weights():
    base = build_policy(SMALL, TOK)
    linear, direct = split_targets(base, LORA.target_modules)
    assert linear == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert direct == ["gate_up_proj", "down_proj"]
    with pytest.raises(ValueError, match=r"policy.lora.target_modules: 'qkv' names no Linear module"):
        split_targets(base, ("qkv",))
    with pytest.raises(ValueError, match=r"policy.lora.dropout is 0.1 but \['gate_up_proj'\]"):
        attach(base, LoraSettings(dropout=0.1, target_modules=("q_proj", "gate_up_proj")))


def test_only_adapters_train_and_fresh_adapters_change_nothing():
    base, model = lora_policy()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    families = {module_family(n) for n in trainable}
    assert families == {ATTENTION, EXPERTS}  # q/k/v/o and the fused experts; no router, embeddings or head
    tokens, mask, where = batch()
    assert torch.equal(
        token_logprobs(model, tokens, mask, where=where)[0], token_logprobs(base, tokens, mask, where=where)[0]
    )


def test_reference_with_adapters_disabled_is_exactly_the_base_model():
    base, model = lora_policy()
    scramble_adapters(model)
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4, "kl_coef": 0.1}, pad_id=TOK.pad_id)
    assert trainer.reference.model is model  # no second copy
    tokens, mask, where = batch()
    adapted = token_logprobs(model, tokens, mask, where=where)[0]
    data = collate_tokens(tokens, where)
    reference = trainer.reference.logprobs(data)
    expected = token_logprobs(base.eval(), tokens, mask, where=where)[0]
    assert not torch.allclose(adapted, expected, atol=1e-3)  # the adapters do change the policy ...
    assert torch.equal(reference, expected)  # ... and the reference is the base, bit for bit
    assert model.training  # the policy's mode is restored


def collate_tokens(tokens, where):
    """A Batch over raw tokens: the prompt is the first 6, the rest one action segment."""
    from testbed.types import Segment, Trajectory

    trajs = []
    for row, mask_row in zip(tokens.tolist(), where.tolist()):
        cut = mask_row.index(True)
        traj = Trajectory(
            prompt_tokens=row[:cut],
            segments=[Segment("action", row[cut:], [0.0] * (len(row) - cut))],
            prompt_text="",
            response_text="",
        )
        traj.verdict = Verdict(quality=1, style_match=1, style="cute")
        trajs.append(traj)
    return collate(trajs, TOK.pad_id)


def test_merged_weights_are_peft_merge_and_load_into_a_plain_model():
    base, model = lora_policy()
    scramble_adapters(model)
    merged = merged_state(model)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    assert merged.keys() == base.state_dict().keys() == reference.keys()
    for key in reference:
        assert torch.equal(merged[key], reference[key]), key
    plain = copy.deepcopy(base)
    plain.load_state_dict(merged)
    tokens, mask, where = batch()
    got = token_logprobs(plain, tokens, mask, where=where)[0]  # the lean forward of a plain model
    want = token_logprobs(model, tokens, mask, where=where)[0]  # transformers' forward through the adapters
    assert (got - want).abs().max() < 1e-5
    assert not has_adapters(plain)


def test_merge_plan_is_pure_on_a_state_dict():
    _, model = lora_policy()
    scramble_adapters(model)
    plan = merge_plan(model)
    assert {item.layout for item in plan} == {"linear", "experts_out_in"}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = {k: v.clone() for k, v in state.items()}
    merged_weights(state, plan)
    assert all(torch.equal(state[k], before[k]) for k in before)  # the input is left alone


def test_critic_lora_trains_adapters_on_the_experts_only():
    _, model = lora_policy()
    trainer = SAOTrainer(
        model, {"episodes_per_update": 4, "critic_trainable": "lora", "critic_lora_r": 2}, pad_id=TOK.pad_id
    )
    critic = trainer.critic
    assert not has_adapters(model.get_base_model().model.layers[0].self_attn.q_proj.base_layer)
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    for name, p in critic.named_parameters():
        family = module_family(name)
        if family == EXPERTS:
            assert p.requires_grad == (".lora_" in name), name
        elif family == ATTENTION:
            assert not p.requires_grad, name
        elif family == ROUTER:
            assert p.requires_grad, name
    assert any(".lora_" in n for n in trainable)
    assert not any(".self_attn." in n and ".lora_" in n for n, _ in critic.named_parameters())  # none on attention
    counts = trainer.parameter_counts
    assert counts["trainable_experts"] < counts["total_experts"]
    assert counts.get("trainable_attention", 0) == 0


def rollouts(model, n, seed=0):
    """Real samples from the model (transformers' forward through the adapters), rewards 1/0 in turn."""
    from testbed.engines.hf_engine import HFEngine
    from testbed.scenario.schema import SamplingConfig
    from testbed.world import prompts, render_prompt

    torch.manual_seed(seed)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=8))
    assert engine.lean is None  # the lean decoder would read the base weights alone
    specs = prompts("train")
    trajs = engine.generate([render_prompt(specs[i], ["cute", "academic"]) for i in range(n)])
    for i, traj in enumerate(trajs):
        traj.verdict = Verdict(quality=1, style_match=i % 2, style="cute")
        traj.group_id, traj.prompt_id = i, f"p{i}"
    return trajs


def test_training_moves_the_adapters_and_leaves_the_base_bit_identical():
    _, model = lora_policy()
    args = {"episodes_per_update": 8, "value_warmup_updates": 0, "kl_coef": 0.1, "critic_trainable": "lora"}
    trainer = SAOTrainer(model, args, pad_id=TOK.pad_id)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = [trainer.update(rollouts(model, 8, seed=step)) for step in range(2)]
    assert trainer.version == 2
    for name, p in model.named_parameters():
        if ".lora_B." in name:
            assert not torch.equal(p, before[name]), name  # B starts at 0: each one must have moved
        elif ".lora_A." not in name:
            assert torch.equal(p, before[name]), name
    assert metrics[0]["kl_ref"] == 0.0 < metrics[1]["kl_ref"]  # the reference stayed the starting policy


@pytest.mark.parametrize("bucket_mb", [None, 0.002])
def test_ray_learner_publishes_merged_weights_for_a_plain_engine(bucket_mb):
    """What a Ray learner publishes with policy.lora: merged weights under the plain model's keys,
    in one bucket or in many small ones (each adapter pair travels with the weight it merges into)."""
    from testbed.runtimes.ray.learner import LearnerWorker
    from testbed.runtimes.ray.rollout import build_policy as plain_policy
    from testbed.runtimes.ray.rollout import load_buckets
    from testbed.runtimes.ray.trainer_factory import TrainerFactory
    from testbed.scenario.schema import ArmConfig
    from testbed.scenario.sharding import FSDPConfig

    base = build_policy(SMALL, TOK)
    arm = ArmConfig(name="rm", type="running_mean", args={"episodes_per_update": 8})
    state = {k: v.clone() for k, v in base.state_dict().items()}
    factory = TrainerFactory(arm, base.config, state, TOK.pad_id, 1.0, 0, 1, lora=LORA)
    fsdp = FSDPConfig(publish_bucket_mb=bucket_mb)
    worker = LearnerWorker(factory, rank=0, world=1, torch_threads=1, fsdp=fsdp)
    worker.setup(None, 10.0)
    policy = worker.trainer.policy
    _, version, buckets = worker.update(rollouts(policy, 8), None)  # in process: the buckets themselves
    assert version == 1
    assert len(buckets) == 1 if bucket_mb is None else len(buckets) > 5
    published = {k: v for bucket in buckets for k, v in bucket.items()}
    assert published.keys() == state.keys()
    engine_model = plain_policy(base.config, state)  # what a rollout actor builds, then loads into
    assert load_buckets(engine_model, buckets) == len(buckets)
    assert not has_adapters(engine_model)
    assert any(not torch.equal(published[k], state[k]) for k in state)  # the update reached the engine
    tokens, mask, where = batch()
    got = token_logprobs(engine_model, tokens, mask, where=where)[0]
    want = token_logprobs(policy, tokens, mask, where=where)[0]
    assert (got - want).abs().max() < 1e-5


def test_memory_plan_counts_adapters_and_their_state_alone():
    from testbed.models.memory import ModelShape, Settings, adapter_parameters, learner_items

    shape = ModelShape(
        parameters=1000,
        moe_parameters=300,
        layers=1,
        hidden=8,
        vocab=10,
        kv_heads=1,
        head_dim=8,
        top_k=1,
        expert_width=4,
        largest_layer=500,
        router_parameters=20,
        matrices=(
            ("model.layers.0.self_attn.q_proj.weight", (8, 8)),
            ("model.layers.0.mlp.experts.gate_up_proj", (2, 8, 8)),
            ("model.layers.0.mlp.gate.weight", (2, 8)),
        ),
    )
    # q_proj: 2 x (8 + 8) = 32; the fused experts: 2 x 2 experts x (8 + 8) = 64
    assert adapter_parameters(shape, ("q_proj", "gate_up_proj"), 2) == 96
    assert adapter_parameters(shape, None, 2) == 64  # the critic's: the experts alone
    s = Settings(lora_targets=("q_proj", "gate_up_proj"), lora_r=2, reference=True, critic="lora", critic_lora_r=2)
    items = learner_items(shape, s)
    assert items["policy weights"] == (1000 + 96) * 4
    assert items["policy gradients"] == 96 * 4 and items["policy optimiser"] == 2 * 96 * 4
    assert "reference weights" not in items  # the policy with its adapters off
    assert items["critic weights"] == (1000 + 64) * 4
    assert items["critic gradients"] == (64 + 20) * 4  # adapters and routers


def test_without_peft_the_lora_extra_is_named(monkeypatch):
    from testbed.extras import MissingExtra

    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # as if not installed
    with pytest.raises(MissingExtra, match=r"pip install 'testbed\[lora\]'"):
        attach(build_policy(SMALL, TOK), LORA)


def test_adapters_are_drawn_from_the_seed_alone():
    """The same adapters on every learner rank of a seed (a Ray learner group checks that its
    workers built the same trainer), and the run's random stream left where it was."""
    a = attach(build_policy(SMALL, TOK), LORA, seed=5)
    torch.manual_seed(99)  # another stream before the next build changes nothing
    b = attach(build_policy(SMALL, TOK), LORA, seed=5)
    c = attach(build_policy(SMALL, TOK), LORA, seed=6)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
    assert torch.equal(a.state_dict()[key], b.state_dict()[key])
    assert not torch.equal(a.state_dict()[key], c.state_dict()[key])
    policy = build_policy(SMALL, TOK)
    state = torch.random.get_rng_state()
    attach(policy, LORA, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)  # attach draws from its own stream
