"""MoE routing recorded, perturbed and replayed (testbed/models/routing.py, trainers/routing_replay.py):
the HF engine records the expert ids of every fed token and they are the trainer's own when nothing
perturbs them; with `router_noise` they differ on some tokens and `mismatch_expert_diff` is the hand
count; under r3 the training forward uses exactly the recorded experts and its gradient reaches the
router through the gate weights; r2 holds the trainer's own routing through an update's steps (the
policy's across GRPO's epochs, SAO's critic's across its K steps)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from testbed.engines.hf_engine import HFEngine
from testbed.engines.mismatch import MismatchProbe
from testbed.models.policy import build_policy, token_logprobs_and_routing
from testbed.models.routing import RouterPerturbation, expert_choice, expert_table
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.types import Verdict
from testbed.world import prompts, render_prompt
from trainers.batching import collate
from trainers.grpo import GRPOTrainer
from trainers.routing_replay import rollout_routing
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

TOK = WordTokenizer.build()
PROMPTS = [render_prompt(spec, ["cute", "academic"]) for spec in prompts("train")[:8]]


def policy(seed: int = 0):
    cfg = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, num_experts=4, expert_size=16)
    return build_policy(cfg, TOK, seed=seed).eval()


def judged(trajs, rewards=(1.0, 0.0)):
    for i, traj in enumerate(trajs):
        r = int(rewards[i % len(rewards)])
        traj.verdict, traj.group_id, traj.prompt_id = Verdict(r, 1, "cute"), i // 2, f"p{i // 2}"
    return trajs


def transformers_routing(model, traj) -> np.ndarray:
    """The trainer's expert ids at every fed position of one episode, by transformers' own forward."""
    tokens = torch.tensor([[*traj.prompt_tokens, *traj.response_tokens]])
    with torch.no_grad():
        out = model(input_ids=tokens, output_router_logits=True, use_cache=False)
    ids = [logits.softmax(-1).topk(2, dim=-1).indices for logits in out.router_logits]  # each [T, k]
    return torch.stack(ids, dim=1)[:-1].numpy()  # [T - 1, L, k]: the last token is never fed


def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[positions]: whether the top-k sets differ in any layer (the order within a set is no difference)."""
    return (np.sort(a, -1) != np.sort(b, -1)).any(-1).any(-1)


def test_expert_choice_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]], requires_grad=True)
    p = torch.softmax(logits.detach(), -1)[0]
    top, index = expert_choice(logits, 2, True)
    assert index.tolist() == [[0, 1]]
    torch.testing.assert_close(top[0], torch.stack([p[0], p[1]]) / (p[0] + p[1]))
    forced = torch.tensor([[3, 2]])  # replay the two least likely experts: their gate weights are the live softmax's
    top, index = expert_choice(logits, 2, True, forced)
    assert index.tolist() == [[3, 2]]
    torch.testing.assert_close(top[0], torch.stack([p[3], p[2]]) / (p[3] + p[2]))
    top[0, 0].backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # the router's logits get the gradient
    free = torch.tensor([[-1, -1]])  # an unrecorded row routes itself
    assert expert_choice(logits.detach(), 2, True, free)[1].tolist() == [[0, 1]]


def test_router_perturbation_settings():
    assert not RouterPerturbation().active
    rounding = RouterPerturbation("bfloat16")
    x = torch.tensor([1.0 + 2**-12])
    assert rounding(x).item() == 1.0  # bfloat16 keeps 8 bits of mantissa
    state = torch.get_rng_state()
    RouterPerturbation(noise=0.5, seed=3)(torch.zeros(4))
    assert torch.equal(torch.get_rng_state(), state)  # its own generator: the sampling stream is untouched
    with pytest.raises(ValueError, match="router_noise"):
        RouterPerturbation(noise=-1.0)
    with pytest.raises(ValueError, match="router_rounding"):
        RouterPerturbation("float16")  # type: ignore[arg-type]


@pytest.mark.parametrize("lean", [True, False])
def test_engine_records_the_trainers_own_routing_for_every_fed_token(lean):
    model = policy()
    torch.manual_seed(0)
    trajs = HFEngine(model, TOK, SamplingConfig(max_new_tokens=12), lean=lean).generate(PROMPTS)
    for traj in trajs:
        assert traj.experts.dtype == np.uint8
        assert traj.experts.shape == (len(traj.prompt_tokens) + len(traj.response_tokens) - 1, 2, 2)
        assert not differs(traj.experts, transformers_routing(model, traj)).any()


def test_router_noise_flips_some_experts_and_the_probe_counts_them_by_hand():
    model = policy()
    torch.manual_seed(0)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=12), router_noise=0.02, noise_seed=1)
    trajs = engine.generate(PROMPTS)
    flipped = total = 0
    for traj in trajs:
        # the routing that decided each response token's log-prob: the position before it
        start = len(traj.prompt_tokens) - 1
        deciding = slice(start, start + len(traj.response_tokens))
        flips = differs(traj.experts[deciding], transformers_routing(model, traj)[deciding])
        flipped, total = flipped + int(flips.sum()), total + len(flips)
    assert 0 < flipped < total  # some tokens, not all: flips happen where the router is nearly tied
    measured = MismatchProbe(model, TOK.pad_id, 1.0)(trajs, version=0)
    assert measured["mismatch_tokens"] == total
    assert measured["mismatch_expert_diff"] == flipped / total
    assert 0 < measured["mismatch_router_diff"] <= measured["mismatch_expert_diff"]


def test_a_revision_turn_keeps_the_routing_of_the_positions_recorded_before():
    model = policy()
    torch.manual_seed(0)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=8))
    trajs = engine.generate(PROMPTS[:2])
    first = [t.experts.copy() for t in trajs]
    engine.extend(trajs, ["too long, make it cute", "more classical"])
    for traj, before in zip(trajs, first):
        assert traj.experts.shape[0] == len(traj.prompt_tokens) + len(traj.response_tokens) - 1
        assert np.array_equal(traj.experts[: len(before)], before)
        assert not differs(traj.experts, transformers_routing(model, traj)).any()


def captured_experts(model):
    """A list that receives the expert ids [N, k] every MoE layer of `model` dispatches to, in order."""
    seen: list[torch.Tensor] = []
    for layer in model.model.layers if hasattr(model, "model") else model.layers:
        layer.mlp.experts.register_forward_pre_hook(lambda _m, args: seen.append(args[1].clone()))
    return seen


@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_r3_trains_on_exactly_the_recorded_experts_and_the_router_still_learns(path, monkeypatch):
    """Both training forwards: the lean one, and transformers' own with router hooks (what a LoRA,
    DDP or FSDP policy takes)."""
    if path == "transformers":
        monkeypatch.setattr("testbed.models.lean_forward.supports", lambda backbone: False)
    model = policy()
    torch.manual_seed(0)
    trajs = HFEngine(model, TOK, SamplingConfig(max_new_tokens=12), router_noise=0.05, noise_seed=2).generate(
        PROMPTS[:1]
    )
    data = collate(trajs, TOK.pad_id)
    recorded = rollout_routing(data)
    fed = trajs[0].experts.shape[0]
    free = transformers_routing(model, trajs[0])
    assert differs(trajs[0].experts, free).any()  # the replay has something to force
    seen = captured_experts(model)
    logp, _, _ = token_logprobs_and_routing(
        model, data.tokens, data.attention_mask, where=data.action_mask, forced=recorded
    )
    used = torch.stack(seen, dim=1)[:fed].numpy()  # [T, L, k] over the one row's real positions
    assert not differs(used, trajs[0].experts).any()  # the same top-k sets, token by token
    model.zero_grad()
    (-(logp * data.action_mask).sum()).backward()
    for layer in model.model.layers:  # the choice is fixed: the gate weights are the router's only path
        assert layer.mlp.gate.weight.grad is not None and layer.mlp.gate.weight.grad.abs().sum() > 0


def test_r3_is_refused_without_recorded_routing():
    model = policy()
    torch.manual_seed(0)
    trajs = judged(HFEngine(model, TOK, SamplingConfig(max_new_tokens=6)).generate(PROMPTS[:4]))
    for traj in trajs:
        traj.experts = None
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4, "routing_replay": "r3"}, pad_id=TOK.pad_id)
    with pytest.raises(ValueError, match="r3 replays the experts the rollout engine recorded"):
        trainer.update(trajs)


def test_r3_replays_the_generating_versions_routing_after_the_policy_moved():
    """A stale episode: generated by version 0, trained after the policy moved. r3 replays the
    routing version 0 chose, not the routing the current weights would choose."""
    model = policy()
    torch.manual_seed(0)
    engine = HFEngine(model, TOK, SamplingConfig(max_new_tokens=8))
    stale = judged(engine.generate(PROMPTS[:4]))
    v0 = [transformers_routing(model, t) for t in stale]
    trainer = RunningMeanTrainer(model, {"episodes_per_update": 4, "lr": 0.5}, pad_id=TOK.pad_id)
    trainer.update(judged(engine.generate(PROMPTS[4:8])))  # the shared module moves to version 1
    now = [transformers_routing(model, t) for t in stale]
    assert any(differs(a, b).any() for a, b in zip(v0, now))
    replayed = rollout_routing(collate(stale, TOK.pad_id))
    for row, ids in enumerate(v0):
        assert not differs(replayed[row, : len(ids)].numpy(), ids).any()


def test_r2_holds_the_routing_of_the_start_of_the_update_through_grpos_epochs():
    model = policy()
    torch.manual_seed(0)
    trajs = judged(HFEngine(model, TOK, SamplingConfig(max_new_tokens=8)).generate(PROMPTS[:4], n=2))
    args = {"group_size": 2, "episodes_per_update": 8, "epochs": 2, "lr": 0.5, "routing_replay": "r2"}
    trainer = GRPOTrainer(model, args, pad_id=TOK.pad_id)
    before = copy.deepcopy(model)
    seen = captured_experts(model)
    trainer.update(trajs)
    # two layers per forward: the no-grad forward that reads the routing, then one forward per epoch
    forwards = [torch.stack(seen[i : i + 2], dim=1) for i in range(0, len(seen), 2)]
    assert len(forwards) == 3
    assert torch.equal(forwards[1], forwards[0]) and torch.equal(forwards[2], forwards[0])
    own_before = expert_table([transformers_routing(before, t) for t in trajs], 64)
    own_after = expert_table([transformers_routing(model, t) for t in trajs], 64)
    assert (own_before != own_after).any()  # ... though the router moved in between


def test_r2_holds_the_critics_own_routing_through_its_k_steps():
    model = policy()
    torch.manual_seed(0)
    trajs = judged(HFEngine(model, TOK, SamplingConfig(max_new_tokens=8)).generate(PROMPTS[:4]))
    args = {
        "episodes_per_update": 4,
        "value_pretrain_samples": 0,
        "value_warmup_updates": 1,  # critic steps only: the policy stays put
        "value_updates_per_policy_update": 3,
        "critic_lr": 0.5,
        "routing_replay": "r2",
    }
    trainer = SAOTrainer(model, args, pad_id=TOK.pad_id)
    seen = captured_experts(trainer.critic.backbone)
    trainer.update(trajs)
    forwards = [torch.stack(seen[i : i + 2], dim=1) for i in range(0, len(seen), 2)]
    assert len(forwards) >= 4  # the first forward, two more critic steps, the advantages' pass
    for other in forwards[1:]:
        assert torch.equal(other, forwards[0])
    data = collate(trajs, TOK.pad_id)
    with torch.no_grad():
        _, router = trainer.critic(data.tokens, data.attention_mask, True)
    free = torch.stack([z.softmax(-1).topk(2, -1).indices for z in router], 1)[data.attention_mask.reshape(-1).bool()]
    assert not torch.equal(free, forwards[0])  # the critic's router moved: without replay it would route elsewhere
