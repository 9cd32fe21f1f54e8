"""The trainers on real (tiny) MoE models and real trajectories: what each update must change,
what it must leave alone, and the metrics it reports."""

import warnings

import pytest
import torch

from testbed.engines.hf_engine import HFEngine
from testbed.models.critic import ATTENTION, EXPERTS, ROUTER, Critic, module_family
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.types import Verdict
from testbed.world import prompts, render_prompt
from trainers.grpo import G1_WARNING, GRPOTrainer
from trainers.losses import policy_gradient_loss
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

TOK = WordTokenizer.build()
SMALL = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16)


def policy(seed=0):
    return build_policy(SMALL, TOK, seed=seed)


def rollouts(model, n, rewards=None, groups=1, seed=0):
    """Real samples from the model, given rewards (alternating 1/0 unless told)."""
    torch.manual_seed(seed)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=10))
    specs = prompts("train")
    texts = [render_prompt(specs[i], ["cute", "academic"]) for i in range(n // groups)]
    trajs = engine.generate(texts, n=groups)
    for i, traj in enumerate(trajs):
        r = rewards[i] if rewards is not None else i % 2
        traj.verdict = Verdict(quality=1, style_match=int(r), style="cute")
        traj.group_id = i // groups
        traj.prompt_id = f"p{i // groups}"
    return trajs


def snapshot(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def test_module_families():
    assert module_family("model.layers.0.self_attn.q_proj.weight") == ATTENTION
    assert module_family("model.layers.1.mlp.experts.gate_up_proj") == EXPERTS
    assert module_family("model.layers.1.mlp.gate.weight") == ROUTER
    assert module_family("model.embed_tokens.weight") == "other"


def test_frozen_attention_critic_keeps_attention_bit_identical():
    model = policy()
    trainer = SAOTrainer(
        model, {"episodes_per_update": 8, "value_warmup_updates": 0, "critic_lr": 1e-2}, pad_id=TOK.pad_id
    )
    before = snapshot(trainer.critic)
    for step in range(3):
        trainer.update(rollouts(model, 8, seed=step))
    after = snapshot(trainer.critic)
    attention = [n for n in before if ".self_attn." in n]
    moe = [n for n in before if ".mlp." in n]
    assert attention and moe
    for name in attention:
        assert torch.equal(before[name], after[name]), name
    assert all(not torch.equal(before[n], after[n]) for n in moe)  # router and experts all learn
    assert not torch.equal(before["value_head.weight"], after["value_head.weight"])
    assert torch.equal(before["backbone.embed_tokens.weight"], after["backbone.embed_tokens.weight"])


def test_critic_trainable_all_moves_attention_too():
    model = policy()
    trainer = SAOTrainer(
        model, {"episodes_per_update": 8, "critic_trainable": "all", "value_warmup_updates": 0}, pad_id=TOK.pad_id
    )
    before = snapshot(trainer.critic)
    trainer.update(rollouts(model, 8))
    after = snapshot(trainer.critic)
    assert any(not torch.equal(before[n], after[n]) for n in before if ".self_attn." in n)


def test_critic_starts_from_the_sft_policy_weights():
    model = policy()
    critic = Critic.from_policy(model)
    for name, param in model.model.named_parameters():
        assert torch.equal(param, dict(critic.backbone.named_parameters())[name])
    assert critic.backbone is not model.model


def test_sao_update_metrics_and_warmup():
    model = policy()
    trainer = SAOTrainer(model, {"episodes_per_update": 8, "value_warmup_updates": 1}, pad_id=TOK.pad_id)
    policy_before = snapshot(model)
    warm = trainer.update(rollouts(model, 8))
    assert warm["value_warmup"] == 1.0 and trainer.version == 0
    assert all(torch.equal(policy_before[n], p) for n, p in model.named_parameters())  # policy frozen in warm-up
    metrics = trainer.update(rollouts(model, 8, seed=1))
    assert trainer.version == 1
    for key in (
        "policy_loss",
        "critic_loss",
        "value_explained_variance",
        "entropy",
        "approx_kl",
        "dis_masked_frac",
        "policy_grad_norm_attention",
        "policy_grad_norm_experts",
        "policy_grad_norm_router",
        "critic_grad_norm_experts",
        "critic_grad_norm_router",
        "policy_expert_load_cv",
    ):
        assert key in metrics, key
    assert "critic_grad_norm_attention" not in metrics  # frozen: no gradient at all
    assert metrics["dis_masked_frac"] == 0.0  # on-policy: every ratio is 1, inside the band


def test_k_value_updates_per_policy_update():
    model = policy()
    calls = []
    trainer = SAOTrainer(
        model,
        {"episodes_per_update": 8, "value_updates_per_policy_update": 3, "value_warmup_updates": 0},
        pad_id=TOK.pad_id,
    )
    original = trainer._critic_step
    trainer._critic_step = lambda *a, **k: calls.append(1) or original(*a, **k)
    trainer.update(rollouts(model, 8))
    assert len(calls) == 3


def test_value_pretraining_improves_explained_variance():
    model = policy()
    trainer = SAOTrainer(
        model, {"value_pretrain_epochs": 8, "value_pretrain_batch": 16, "critic_lr": 3e-3}, pad_id=TOK.pad_id
    )
    # a learnable signal: reward 1 exactly when the response is short
    samples = rollouts(model, 64, seed=3)
    median = sorted(len(t.response_tokens) for t in samples)[32]
    for t in samples:
        t.verdict = Verdict(quality=1, style_match=int(len(t.response_tokens) < median), style="cute")
    report = trainer.warmup(samples)
    curve = report["curve"]
    assert curve[-1]["value_loss"] < curve[0]["value_loss"]
    assert report["parameters"]["trainable"] < report["parameters"]["total"]


def test_value_pretraining_reports_each_critic_step():
    """Steps 1..epochs x batches, each with its epoch and the epoch's mean value loss so far."""
    trainer = SAOTrainer(policy(), {"value_pretrain_epochs": 2, "value_pretrain_batch": 8}, pad_id=TOK.pad_id)
    seen = []
    report = trainer.warmup(
        rollouts(policy(), 20), on_step=lambda step, total, **values: seen.append((step, total, values))
    )
    assert [(step, total) for step, total, _ in seen] == [(s, 6) for s in range(1, 7)]  # 3 batches (8, 8, 4) x 2 epochs
    assert [values["epoch"] for _, _, values in seen] == [1, 1, 1, 2, 2, 2]
    assert [seen[2][2]["value_loss"], seen[5][2]["value_loss"]] == [point["value_loss"] for point in report["curve"]]
    assert seen[0][2]["value_loss"] != seen[1][2]["value_loss"]  # a running mean, step by step


def test_grpo_group_size_one_warns_and_has_zero_advantage():
    model = policy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = GRPOTrainer(model, {"group_size": 1, "episodes_per_update": 8}, pad_id=TOK.pad_id)
    assert any(G1_WARNING in str(w.message) for w in caught)
    before = snapshot(model)
    metrics = trainer.update(rollouts(model, 8))
    assert metrics["advantage_abs_mean"] == 0.0 and metrics["zero_advantage_groups"] == 1.0
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # nothing to learn from


def test_grpo_groups_learn_from_within_group_differences():
    model = policy()
    trainer = GRPOTrainer(model, {"group_size": 4, "episodes_per_update": 8}, pad_id=TOK.pad_id)
    # group 0 has mixed rewards, group 1 all ones (zero advantage)
    metrics = trainer.update(rollouts(model, 8, rewards=[1, 0, 0, 1, 1, 1, 1, 1], groups=4))
    assert metrics["zero_advantage_groups"] == 0.5 and metrics["advantage_abs_mean"] > 0
    assert trainer.episodes_per_update == 8 and trainer.group_size == 4


def test_running_mean_baseline_window():
    model = policy()
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4, "window": 4}, pad_id=TOK.pad_id)
    m1 = trainer.update(rollouts(model, 4, rewards=[1, 1, 1, 1]))
    assert m1["advantage_abs_mean"] == pytest.approx(0.0)  # every reward equals the window mean
    m2 = trainer.update(rollouts(model, 4, rewards=[0, 0, 0, 0], seed=1))
    # window after each push: [1,1,1,0] -> -0.75, [1,1,0,0] -> -0.5, [1,0,0,0] -> -0.25, [0,0,0,0] -> 0
    assert m2["advantage_abs_mean"] == pytest.approx((0.75 + 0.5 + 0.25 + 0) / 4)


def kl_now(model, reference, trajs):
    from testbed.models.policy import token_logprobs
    from trainers.batching import collate
    from trainers.losses import kl_to_reference

    data = collate(trajs, TOK.pad_id)
    with torch.no_grad():
        return float(
            kl_to_reference(
                token_logprobs(model, data.tokens, data.attention_mask)[0],
                token_logprobs(reference, data.tokens, data.attention_mask)[0],
                data.action_mask,
            )
        )


@pytest.mark.parametrize("kind", ["running_mean", "grpo", "sao"])
def test_kl_anchor_pulls_the_policy_back_towards_where_it_started(kind):
    import copy

    model = policy()
    start = copy.deepcopy(model)
    config = {
        "running_mean": {"episodes_per_update": 8, "kl_coef": 1.0, "lr": 1e-3},
        "grpo": {"group_size": 2, "episodes_per_update": 8, "kl_coef": 1.0, "lr": 1e-3},
        "sao": {
            "episodes_per_update": 8,
            "kl_coef": 1.0,
            "policy_lr": 1e-3,
            "value_warmup_updates": 0,
            "value_pretrain_samples": 0,
        },
    }[kind]
    trainer = {"running_mean": RunningMeanTrainer, "grpo": GRPOTrainer, "sao": SAOTrainer}[kind](
        model, config, pad_id=TOK.pad_id
    )
    with torch.no_grad():  # drift away from the reference
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    # Equal rewards: no advantage signal for the window and group baselines, so the KL term moves it.
    # SAO's baseline is its critic, which starts at V = 0: rewards of 0 give it no signal either
    # (rewards of 1 would give A = 1 on every sampled token, a push away from the reference whose
    # size against the KL's pull depends on the sample drawn).
    reward = 0 if kind == "sao" else 1
    trajs = rollouts(model, 8, rewards=[reward] * 8, groups=2 if kind == "grpo" else 1)
    before = kl_now(model, start, trajs)
    metrics = trainer.update(trajs)
    assert metrics["kl_ref"] == pytest.approx(before, rel=1e-4)  # the penalty sees the same KL
    assert kl_now(model, start, trajs) < 0.9 * before


def test_without_kl_coef_there_is_no_reference_copy():
    trainer = RunningMeanTrainer(policy(), {"episodes_per_update": 8}, pad_id=TOK.pad_id)
    assert trainer.reference is None and "kl_ref" not in trainer.update(rollouts(trainer.policy, 8))


@pytest.mark.parametrize("order", ["fitted", "pre_update"])
def test_sao_advantages_from_sets_which_critic_scores_the_batch(order):
    """'fitted' scores the batch with the critic after its K steps, 'pre_update' with the critic
    before it saw the batch; both log |A| from each and the shrinkage between them."""
    model = policy()
    trainer = SAOTrainer(
        model,
        {
            "episodes_per_update": 8,
            "value_warmup_updates": 0,
            "critic_lr": 1e-2,
            "value_updates_per_policy_update": 4,
            "advantages_from": order,
        },
        pad_id=TOK.pad_id,
    )
    m = trainer.update(rollouts(model, 8, rewards=[1, 0, 0, 1, 1, 0, 1, 0]))
    chosen = m["advantage_abs_fitted"] if order == "fitted" else m["advantage_abs_pre"]
    assert m["advantage_abs_mean"] == pytest.approx(chosen, rel=1e-5)
    assert m["advantage_abs_pre"] != pytest.approx(m["advantage_abs_fitted"], rel=1e-3)  # the K steps moved the critic
    assert m["advantage_shrink"] == pytest.approx(m["advantage_abs_fitted"] / m["advantage_abs_pre"])
    assert -1.0 <= m["advantage_return_corr_pre"] <= 1.0


def test_advantage_shrinkage_by_hand():
    from trainers.diagnostics import advantage_shrinkage

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    before = torch.tensor([[1.0, -1.0, 9.0], [2.0, 2.0, 2.0]])  # the masked 9 must not count
    fitted = before / 2
    rewards = torch.tensor([0.0, 1.0])
    m = advantage_shrinkage(before, fitted, mask, rewards)
    assert m["advantage_abs_pre"] == pytest.approx((1 + 1 + 2 + 2 + 2) / 5)
    assert m["advantage_shrink"] == pytest.approx(0.5)
    # row means 0 and 2 against rewards 0 and 1: perfectly correlated
    assert m["advantage_return_corr_pre"] == pytest.approx(1.0) and m["advantage_return_corr_fitted"] == pytest.approx(
        1.0
    )
    flat = advantage_shrinkage(before, fitted, mask, torch.tensor([1.0, 1.0]))
    assert flat["advantage_return_corr_pre"] != flat["advantage_return_corr_pre"]  # nan: no spread in the rewards


def test_grpo_with_dis_masks_what_leaves_the_band_where_ppo_clip_keeps_it():
    model = policy()
    dis = GRPOTrainer(model, {"group_size": 4, "episodes_per_update": 8, "policy_loss": "dis"}, pad_id=TOK.pad_id)
    ppo = GRPOTrainer(model, {"group_size": 4, "episodes_per_update": 8}, pad_id=TOK.pad_id)
    assert ppo.cfg.policy_loss == "ppo_clip"  # the default is unchanged
    # one token (row 2, first) has ratio e^2 = 7.39 to the engine's log-prob: over DIS's 1 + 5, with A = -1
    behaviour = torch.tensor([[-1.0, -2.0], [-3.0, -1.0]])
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.ones(2, 2)
    losses, grads, stats = {}, {}, {}
    for name, trainer in (("dis", dis), ("ppo", ppo)):
        logprobs = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]], requires_grad=True)
        loss, stats[name] = policy_gradient_loss(logprobs, behaviour, advantages, mask, trainer.loss)
        loss.backward()
        losses[name], grads[name] = float(loss), logprobs.grad
    assert stats["dis"]["dis_masked_frac"] == 0.25 and stats["ppo"]["clip_frac"] == 0.0  # 1 of 4 tokens; none
    # DIS: -(1/4) [1 x 1 x (-1) + 1 x 1 x (-2) + 0 + 1 x (-1) x (-1)] = 0.5; that token weighs 0
    assert losses["dis"] == pytest.approx(0.5)
    assert torch.allclose(grads["dis"], torch.tensor([[-0.25, -0.25], [0.0, 0.25]]))
    # PPO clip does not clip a negative advantage above the band: -(1/4) (1 + 1 - e^2 - 1)
    e2 = float(torch.tensor(2.0).exp())
    assert losses["ppo"] == pytest.approx((e2 - 1) / 4)
    assert grads["ppo"][1, 0] == pytest.approx(e2 / 4)
    # and a real update reports the masked share
    metrics = dis.update(rollouts(model, 8, groups=4))
    assert 0.0 <= metrics["dis_masked_frac"] <= 1.0 and "clip_frac" not in metrics


@pytest.mark.parametrize("cls", [RunningMeanTrainer, GRPOTrainer, SAOTrainer])
def test_every_trainer_reports_the_same_step_metrics(cls):
    """One policy step for every trainer (trainers/policy_step.py): one spelling of its metrics."""
    model = policy()
    args = {"episodes_per_update": 4, "value_warmup_updates": 0} if cls is SAOTrainer else {"episodes_per_update": 4}
    trainer = cls(model, {**args, "group_size": 2} if cls is GRPOTrainer else args, pad_id=TOK.pad_id)
    metrics = trainer.update(rollouts(model, 4, groups=2 if cls is GRPOTrainer else 1))
    shared = {"policy_loss", "entropy", "ratio_mean", "approx_kl", "policy_grad_norm", "policy_grad_norm_experts"}
    shared |= {"policy_expert_load_cv", "nonfinite", "skipped_steps", "reward_mean", "response_tokens_mean"}
    assert shared <= metrics.keys() and "grad_norm" not in metrics
    assert metrics["policy_grad_norm"] > 0 and trainer.version == 1


def test_an_older_checkpoint_of_the_running_mean_loads_its_optimizer():
    """The policy's optimiser is `policy_opt` in every trainer; older running-mean and GRPO
    checkpoints named it `optimizer`."""
    model = policy()
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4}, pad_id=TOK.pad_id)
    trainer.update(rollouts(model, 4))
    state = trainer.state_dict()
    state["optimizer"] = state.pop("policy_opt")
    fresh = RunningMeanTrainer(policy(seed=1), {"episodes_per_update": 4}, pad_id=TOK.pad_id)
    fresh.load_state_dict(state)
    moments = [s["exp_avg"] for s in fresh.policy_opt.state_dict()["state"].values()]
    want = [s["exp_avg"] for s in trainer.policy_opt.state_dict()["state"].values()]
    assert moments and all(torch.equal(a, b) for a, b in zip(moments, want))
