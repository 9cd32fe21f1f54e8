"""Numerical faults: a non-finite loss or gradient skips the optimiser step (parameters, optimiser
state and policy version untouched, gradients cleared), is counted, and is reported by update()
as "nonfinite" (the first bad quantity) and "skipped_steps"."""

import math

import pytest
import torch
from torch import nn

from testbed.types import Verdict
from tests.test_trainers import TOK, policy, rollouts, snapshot
from trainers.grpo import GRPOTrainer
from trainers.numerics import guarded_step
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

INF, NAN = float("inf"), float("nan")
KINDS = ("running_mean", "grpo", "sao")


# -- helpers ------------------------------------------------------------------------------------
def make(kind, model):
    if kind == "running_mean":
        return RunningMeanTrainer(model, {"episodes_per_update": 4, "window": 8}, pad_id=TOK.pad_id)
    if kind == "grpo":  # two epochs: several optimiser steps per update
        return GRPOTrainer(model, {"group_size": 2, "episodes_per_update": 4, "epochs": 2}, pad_id=TOK.pad_id)
    return SAOTrainer(model, {"episodes_per_update": 4, "value_warmup_updates": 0}, pad_id=TOK.pad_id)


def batch(kind, model, seed):
    """4 real rollouts with mixed rewards (within each group for GRPO)."""
    return rollouts(model, 4, rewards=[1, 0, 0, 1], groups=2 if kind == "grpo" else 1, seed=seed)


def clone_state(optimizer):
    return {
        k: {n: v.clone() if torch.is_tensor(v) else v for n, v in s.items()}
        for k, s in optimizer.state_dict()["state"].items()
    }


def assert_same_state(before, optimizer):
    after = clone_state(optimizer)
    assert before and before.keys() == after.keys()
    for k in before:
        for n, v in before[k].items():
            assert torch.equal(v, after[k][n]) if torch.is_tensor(v) else v == after[k][n], (k, n)


def assert_same_params(before, module):
    for name, param in module.named_parameters():
        assert torch.equal(before[name], param), name  # torch.equal: inf == inf, a nan never matches


def nan_reward(trajs):
    trajs[0].verdict = Verdict(quality=1, style_match=NAN, style="cute")  # reward 1 * nan
    assert math.isnan(trajs[0].reward)
    return trajs


def assert_skipped(trainer, model, metrics, expected, params, opt_state, version, total):
    assert metrics["nonfinite"] == expected
    assert metrics["skipped_steps"] >= 1
    assert trainer.skipped_steps_total == total + metrics["skipped_steps"]
    assert trainer.version == version
    assert_same_params(params, model)
    assert_same_state(opt_state, trainer.policy_opt)
    assert all(p.grad is None for p in model.parameters())
    loss_and_norm = [k for k in metrics if k in ("policy_loss", "policy_grad_norm", "critic_loss")]
    assert loss_and_norm and all(type(metrics[k]) is float for k in loss_and_norm)


def trained_once(kind):
    """A trainer after one normal update, so its optimiser state is not empty."""
    model = policy()
    trainer = make(kind, model)
    first = trainer.update(batch(kind, model, seed=0))
    assert first["nonfinite"] is None and first["skipped_steps"] == 0 and trainer.version == 1
    return model, trainer


# -- guarded_step on a tiny nn.Linear -----------------------------------------------------------
def linear():
    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    return lin, torch.optim.AdamW(lin.parameters(), lr=0.1), torch.randn(5, 3)


def test_guarded_step_steps_on_finite_and_clips():
    lin, opt, x = linear()
    before = snapshot(lin)
    norm, bad = guarded_step(1000 * lin(x).sum(), lin.parameters(), opt, 1.0, "policy")
    assert bad is None and norm > 1.0  # the norm before clipping
    grad_norm = torch.cat([p.grad.flatten() for p in lin.parameters()]).norm()
    assert grad_norm == pytest.approx(1.0, rel=1e-4)  # clipped
    assert all(not torch.equal(before[n], p) for n, p in lin.named_parameters())
    assert all(s["step"] == 1 for s in opt.state.values())


def test_guarded_step_nan_loss_skips_without_backward():
    lin, opt, x = linear()
    guarded_step(lin(x).sum(), lin.parameters(), opt, 1.0, "policy")  # one step: AdamW has moments
    before, state = snapshot(lin), clone_state(opt)
    backward_calls = []
    lin.weight.register_hook(lambda g: backward_calls.append(1))
    norm, bad = guarded_step(lin(x).sum() * NAN, lin.parameters(), opt, 1.0, "critic")
    assert bad == "critic loss" and math.isnan(norm)
    assert backward_calls == []
    assert_same_params(before, lin)
    assert_same_state(state, opt)
    assert all(p.grad is None for p in lin.parameters())


@pytest.mark.parametrize("value", [INF, NAN])
def test_guarded_step_nonfinite_gradient_skips(value):
    lin, opt, x = linear()
    guarded_step(lin(x).sum(), lin.parameters(), opt, 1.0, "policy")
    before, state = snapshot(lin), clone_state(opt)
    lin.weight.register_hook(lambda g: torch.full_like(g, value))  # the loss stays finite
    loss = lin(x).sum()
    assert math.isfinite(float(loss.detach()))
    norm, bad = guarded_step(loss, lin.parameters(), opt, 1.0, "policy")
    assert bad == "policy grad norm" and not math.isfinite(norm)
    assert_same_params(before, lin)
    assert_same_state(state, opt)
    assert all(p.grad is None for p in lin.parameters())


# -- the trainers -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_nan_reward_skips_the_update(kind):
    model, trainer = trained_once(kind)
    params, opt_state, version, total = snapshot(model), clone_state(trainer.policy_opt), trainer.version, 0
    critic = snapshot(trainer.critic) if kind == "sao" else None
    critic_state = clone_state(trainer.critic_opt) if kind == "sao" else None
    metrics = trainer.update(nan_reward(batch(kind, model, seed=1)))
    # SAO's critic regresses on the nan returns before the policy sees the nan advantages.
    assert_skipped(
        trainer, model, metrics, "critic loss" if kind == "sao" else "policy loss", params, opt_state, version, total
    )
    if kind == "sao":
        assert metrics["skipped_steps"] == 2  # one critic step (the other K-1 not tried) and the policy step
        assert_same_params(critic, trainer.critic)
        assert_same_state(critic_state, trainer.critic_opt)


@pytest.mark.parametrize("kind", KINDS)
def test_poisoned_weight_skips_the_update(kind):
    model, trainer = trained_once(kind)
    trajs = batch(kind, model, seed=1)  # sampled before the poisoning
    with torch.no_grad():
        model.model.layers[0].mlp.gate.weight[0, 0] = INF
    params, opt_state, version = snapshot(model), clone_state(trainer.policy_opt), trainer.version
    metrics = trainer.update(trajs)
    assert_skipped(trainer, model, metrics, "policy loss", params, opt_state, version, 0)
    assert math.isnan(metrics["policy_loss"])


@pytest.mark.parametrize("kind", KINDS)
def test_nonfinite_policy_gradient_skips_the_update(kind):
    model, trainer = trained_once(kind)
    params, opt_state, version = snapshot(model), clone_state(trainer.policy_opt), trainer.version
    model.lm_head.weight.register_hook(lambda g: torch.full_like(g, INF))
    metrics = trainer.update(batch(kind, model, seed=1))
    assert_skipped(trainer, model, metrics, "policy grad norm", params, opt_state, version, 0)
    assert math.isfinite(metrics["policy_loss"]) and metrics["skipped_steps"] == 1


def test_sao_nonfinite_critic_gradient_skips_the_critic_only():
    model, trainer = trained_once("sao")
    critic, critic_state, policy_params = snapshot(trainer.critic), clone_state(trainer.critic_opt), snapshot(model)
    trainer.critic.value_head.weight.register_hook(lambda g: torch.full_like(g, NAN))
    metrics = trainer.update(batch("sao", model, seed=1))
    assert metrics["nonfinite"] == "critic grad norm" and metrics["skipped_steps"] == 1
    assert_same_params(critic, trainer.critic)
    assert_same_state(critic_state, trainer.critic_opt)
    # the policy step, on advantages from the unchanged critic, goes ahead
    assert trainer.version == 2 and any(not torch.equal(policy_params[n], p) for n, p in model.named_parameters())


@pytest.mark.parametrize("kind", KINDS)
def test_a_normal_update_after_a_skipped_one_trains(kind):
    model, trainer = trained_once(kind)
    assert trainer.update(nan_reward(batch(kind, model, seed=1)))["skipped_steps"] >= 1
    skipped = trainer.skipped_steps_total
    params = snapshot(model)
    metrics = trainer.update(batch(kind, model, seed=2))  # running mean: no nan left in the window
    assert metrics["nonfinite"] is None and metrics["skipped_steps"] == 0
    assert trainer.version == 2 and trainer.skipped_steps_total == skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(params[n], p) for n, p in model.named_parameters())


@pytest.mark.parametrize("kind", KINDS)
def test_skipped_steps_total_is_checkpointed(kind):
    model, trainer = trained_once(kind)
    trainer.update(nan_reward(batch(kind, model, seed=1)))
    state = trainer.state_dict()
    assert state["skipped_steps_total"] == trainer.skipped_steps_total >= 1
    fresh = make(kind, policy(seed=1))
    fresh.load_state_dict(state)
    assert fresh.skipped_steps_total == trainer.skipped_steps_total
    del state["skipped_steps_total"]  # a checkpoint from before the counter
    fresh.load_state_dict(state)
    assert fresh.skipped_steps_total == 0
