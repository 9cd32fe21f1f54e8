"""The data-parallel learner on real parts: Ray actors, a gloo process group, tiny Qwen3-MoE
policies and real sampled trajectories. Two learners must hold bit-identical state after every
update, match one trainer on the whole batch, skip a step together when one rank's loss is nan,
and a dead worker must surface as a Ray error."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import ray
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

from testbed.models.policy import token_logprobs, token_logprobs_and_routing
from testbed.runtimes.ray.cluster import start_local
from testbed.runtimes.ray.learner import LearnerGroup, flat_state, gradients, shard_weights, split_batch
from testbed.runtimes.ray.rollout import RolloutActor, build_policy, fetched
from testbed.scenario.schema import SamplingConfig
from testbed.scenario.sharding import FSDPConfig
from testbed.types import Segment, Verdict
from testbed.world import prompts, render_prompt
from tests.test_trainers import TOK, policy, rollouts
from trainers.batching import collate
from trainers.grpo import GRPOTrainer
from trainers.router_balance import router_balance_loss
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

ROOT = Path(__file__).resolve().parent.parent
CLASSES = {"sao": SAOTrainer, "running_mean": RunningMeanTrainer, "grpo": GRPOTrainer}
# Small, but each exercises what the data-parallel maths must get right: SAO with its critic,
# value pretraining and the KL anchor; the running mean with a window that slides over batches
# (global, and per prompt with the sequence-mean aggregation, whose denominator is the whole
# batch's rows); GRPO with groups, two epochs and the router load-balancing loss.
CONFIGS = {
    "sao": (
        "sao",
        {
            "episodes_per_update": 8,
            "value_warmup_updates": 0,
            "value_pretrain_samples": 8,
            "value_pretrain_epochs": 1,
            "value_pretrain_batch": 4,
            "kl_coef": 0.1,
        },
    ),
    "running_mean": ("running_mean", {"episodes_per_update": 8, "window": 6}),
    "running_mean_per_prompt": (
        "running_mean",
        {"episodes_per_update": 8, "window": 2, "per_prompt": True, "loss_aggregation": "sequence_mean"},
    ),
    "grpo": ("grpo", {"group_size": 2, "episodes_per_update": 8, "epochs": 2, "router_aux_loss_coef": 0.05}),
}
TIMEOUT_S = 180  # ray.get timeout: a deadlock fails the test instead of hanging it


@dataclass(frozen=True)
class MakeTrainer:
    """A picklable zero-argument trainer factory (the workers import this module by name)."""

    kind: str
    args: dict = field(default_factory=dict)

    def __call__(self):
        return CLASSES[self.kind](policy(seed=0), self.args, pad_id=TOK.pad_id)


@pytest.fixture(scope="module")
def ray_cluster():
    # PYTHONPATH: the actors must import this checkout, not whatever the venv has installed.
    start_local(
        num_cpus=2,
        logging_level="warning",
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}},
    )
    try:
        yield
    finally:
        ray.shutdown()


def batches(name, n=3, seed=0):
    _kind, args = CONFIGS[name]
    model = policy(seed=0)
    out = [rollouts(model, 8, groups=args.get("group_size", 1), seed=seed + i) for i in range(n)]
    for batch in out:
        # The untrained policy writes every response to the length limit; cut them to different
        # lengths (a prefix keeps its behaviour log-probs), so the shards' token shares differ.
        for i, traj in enumerate(batch):
            seg, keep = traj.segments[0], 2 + (i * 5) % 9
            traj.segments = [Segment("action", seg.tokens[:keep], seg.logprobs[:keep])]
    if args.get("per_prompt"):
        for batch in out:  # repeat prompts, so that the per-prompt windows fill and slide
            for i, traj in enumerate(batch):
                traj.prompt_id = f"p{i % 3}"
    return out


def assert_same(a, b):
    """Bit-identical nested states (torch.equal on every tensor)."""
    assert a.keys() == b.keys()
    for key in a:
        if torch.is_tensor(a[key]):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def assert_close(got, want, atol=1e-5, rtol=1e-5, scale=False):
    """Equal up to float rounding. With `scale` (gradients), to within rtol of each tensor's largest
    element: summing shards reorders float sums, which moves small elements by ~1e-6 of the scale,
    while a wrong shard weighting is off by 10%+. Parameters, element by element: Adam divides each
    gradient element by its own running scale, so a rounding-level gradient element (a rarely routed
    expert) can become a step of up to lr the other way; that is allowed in 2% of elements."""
    assert got.keys() == want.keys()
    for key in got:
        if not torch.is_tensor(got[key]):
            assert got[key] == want[key], key
            continue
        a, b = got[key], want[key]
        if a.is_floating_point() and scale:
            diff, top = float((a - b).abs().max()), float(b.abs().max())
            assert diff <= atol + rtol * top, f"{key}: differs by {diff:.3g}, largest element {top:.3g}"
        elif a.is_floating_point() and a.numel() > 100:
            off = ~torch.isclose(a, b, rtol=rtol, atol=atol)
            assert int(off.sum()) <= max(2, 0.02 * a.numel()), f"{key}: {int(off.sum())} of {a.numel()} elements differ"
            assert float((a - b).abs().max()) <= 0.02, f"{key}: a difference of {float((a - b).abs().max())}"
        else:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m, key=key: f"{key}: {m}")


# -- sharding -----------------------------------------------------------------------------------
def test_split_keeps_order_and_groups():
    trajs = rollouts(policy(), 8, groups=2)  # groups 0,0,1,1,2,2,3,3
    shards = split_batch(trajs, 3, keep_groups=True)
    assert [t for s in shards for t in s] == trajs
    assert [len(s) for s in shards] == [2, 2, 4] or [len(s) for s in shards] == [2, 4, 2]
    for shard in shards:
        assert len({t.group_id for t in shard}) * 2 == len(shard)  # whole groups only
    assert [len(s) for s in split_batch(trajs, 3, keep_groups=False)] == [3, 2, 3]
    weights = shard_weights(shards)
    assert abs(sum(weights) - 1) < 1e-12 and all(w > 0 for w in weights)
    with pytest.raises(ValueError, match="cannot feed"):
        split_batch(trajs, 5, keep_groups=True)
    with pytest.raises(ValueError, match="contiguous"):
        split_batch([trajs[0], trajs[2], trajs[1], trajs[3]], 2, keep_groups=True)  # groups 0, 1, 0, 1


# -- two learners ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_learners_stay_identical_and_match_one(ray_cluster, name):
    kind, args = CONFIGS[name]
    single = MakeTrainer(kind, args)()
    group = LearnerGroup(MakeTrainer(kind, args), 2, timeout_s=60)
    try:
        if getattr(single, "warmup_samples", 0) > 0:
            samples = rollouts(policy(), 8, seed=10)
            report = group.warmup(samples)
            assert report["curve"] == single.warmup(samples)["curve"]  # rank 0's warm-up is the plain one
        for batch in batches(name):
            metrics, version, policy_state = ray.get(group.update(batch), timeout=TIMEOUT_S)
            want = single.update(batch)
            states = ray.get([w.flat_state.remote() for w in group.workers], timeout=TIMEOUT_S)
            assert_same(states[0], states[1])  # after EVERY update: bit-identical, optimiser state too
            # The all-reduced gradient is the whole batch's (to 1% of each tensor's scale: from the second update on
            # it is taken at parameters that already differ by rounding; a wrong shard weighting is off by 10%+).
            grads = ray.get(group.workers[0].gradients.remote(), timeout=TIMEOUT_S)
            assert grads and assert_close(grads, gradients(single), atol=1e-7, rtol=1e-2, scale=True) is None
            assert_close(states[0], flat_state(single.state_dict()))  # and one trainer on the whole batch
            assert version == single.version and metrics["nonfinite"] is None
            rank0_policy = {k.removeprefix("policy/"): v for k, v in states[0].items() if k.startswith("policy/")}
            published = {k: v for bucket in fetched(policy_state) for k, v in bucket.items()}
            assert_same(published, rank0_policy)  # what the runtime publishes is rank 0's policy
            assert metrics["learner_workers"] == 2
            if kind != "running_mean":  # the trainers that compute router statistics
                assert {"policy_expert_load_cv_w0", "policy_expert_load_cv_w1"} <= metrics.keys()
                # the gradient diagnostics run on the all-reduced gradient: the whole batch's
                assert metrics["policy_grad_norm"] == pytest.approx(want["policy_grad_norm"], rel=1e-4)
            if "router_aux_loss" in want:  # all-reduced statistics: the batch's value on every rank
                assert metrics["router_aux_loss"] == pytest.approx(want["router_aux_loss"], rel=1e-5)
        assert single.version == 3
        assert len(set(group.digests())) == 1
    finally:
        group.shutdown()


@pytest.mark.parametrize("name", ["running_mean", "grpo"])
def test_nan_loss_on_one_rank_skips_the_step_on_both(ray_cluster, name):
    kind, args = CONFIGS[name]
    group = LearnerGroup(MakeTrainer(kind, args), 2, timeout_s=60)
    try:
        clean, poisoned = batches(name, n=2)
        poisoned[-1].verdict = Verdict(quality=1, style_match=float("nan"), style="cute")  # rank 1's shard only
        before = ray.get(group.workers[0].flat_state.remote(), timeout=TIMEOUT_S)
        metrics, version, _ = ray.get(group.update(poisoned), timeout=TIMEOUT_S)  # no deadlock
        assert metrics["nonfinite"] == "policy loss" and metrics["skipped_steps"] == 1 and version == 0
        # Rank 0's own loss was finite: it skipped because rank 1's was not.
        assert torch.isfinite(torch.tensor(metrics["policy_loss"]))
        for state in ray.get([w.flat_state.remote() for w in group.workers], timeout=TIMEOUT_S):
            # parameters, optimiser and (running mean) window untouched; the skip counted
            assert_same(state, {**before, "skipped_steps_total": 1})
        metrics, version, _ = ray.get(group.update(clean), timeout=TIMEOUT_S)  # and the group goes on
        assert metrics["nonfinite"] is None and version == 1
        # A checkpoint of the group restores into another group (here of one worker).
        other = LearnerGroup(MakeTrainer(kind, args), 1)
        try:
            other.load_state_dict(group.state_dict())
            assert other.digests() == group.digests()[:1] and other.version() == 1
        finally:
            other.shutdown()
    finally:
        group.shutdown()


def test_a_dead_worker_surfaces_as_a_ray_error(ray_cluster):
    kind, args = CONFIGS["running_mean"]
    group = LearnerGroup(MakeTrainer(kind, args), 2, timeout_s=60)
    try:
        first, second = batches("running_mean", n=2)
        ray.get(group.update(first), timeout=TIMEOUT_S)
        ray.kill(group.workers[1], no_restart=True)
        with pytest.raises(ray.exceptions.RayError) as failure:
            ray.get(group.update(second), timeout=TIMEOUT_S)
        assert not isinstance(failure.value, ray.exceptions.GetTimeoutError)  # it failed, it did not hang
        assert isinstance(failure.value, ray.exceptions.RayActorError)  # the runtime stops on this one
        assert group.version() == 1  # rank 0 left the broken collective and still answers (a checkpoint)
    finally:
        group.shutdown()


def test_one_worker_is_a_plain_remote_trainer(ray_cluster):
    kind, args = CONFIGS["grpo"]
    single = MakeTrainer(kind, args)()
    group = LearnerGroup(MakeTrainer(kind, args), 1)
    try:
        for batch in batches("grpo", n=2):
            metrics, version, _ = ray.get(group.update(batch), timeout=TIMEOUT_S)
            single.update(batch)
            assert_close(
                ray.get(group.workers[0].flat_state.remote(), timeout=TIMEOUT_S), flat_state(single.state_dict())
            )
        assert metrics["learner_workers"] == 1 and "policy_expert_load_cv_w0" in metrics and version == 2
    finally:
        group.shutdown()


def test_published_weights_travel_in_buckets_and_a_rollout_actor_loads_the_learners_policy(ray_cluster):
    """runtime.fsdp.publish_bucket_mb on two FSDP2 ranks: rank 0 puts the gathered policy in the
    object store as one object per bucket (several, each within the bucket size or one tensor), and
    a real rollout actor, loading them one at a time into its engine's module, then samples with
    exactly the learner's weights (its behaviour log-probs are the updated policy's, not the start's)."""
    kind, args = CONFIGS["running_mean"]
    start = policy(seed=0)
    state = {k: v.detach().clone() for k, v in start.state_dict().items()}
    total = sum(v.numel() * v.element_size() for v in state.values())
    cfg = FSDPConfig(param_dtype="float32", publish_bucket_mb=total / 5 / 2**20)
    group = LearnerGroup(MakeTrainer(kind, args), 2, timeout_s=60, strategy="fsdp", fsdp=cfg)
    sampling = SamplingConfig(max_new_tokens=10)
    actor = RolloutActor.options(num_cpus=0.5).remote(start.config, state, TOK, ("hf", {}), sampling, 0, 1)
    try:
        weights = None
        for batch in batches("running_mean", n=2):
            _, version, weights = ray.get(group.update(batch), timeout=TIMEOUT_S)
        assert version == 2 and len(weights) >= 4 and all(isinstance(w, ray.ObjectRef) for w in weights)
        buckets = list(fetched(weights))
        for bucket in buckets:
            size = sum(v.numel() * v.element_size() for v in bucket.values())
            assert size <= cfg.bucket_bytes() or len(bucket) == 1
        learned = group.state_dict()["policy"]  # gathered from the two ranks' shards
        assert [k for bucket in buckets for k in bucket] == list(learned)  # every tensor once, in order
        assert_same({k: v for bucket in buckets for k, v in bucket.items()}, learned)
        assert any(not torch.equal(learned[k], state[k]) for k in state)  # two updates moved the policy
        again = group.policy()  # what a resumed run publishes from loaded learners: the same buckets
        assert len(again) == len(weights) and all(isinstance(w, ray.ObjectRef) for w in again)
        assert_same({k: v for bucket in fetched(again) for k, v in bucket.items()}, learned)
        texts = [render_prompt(spec, ["cute", "academic"]) for spec in prompts("train")[:4]]
        trajs = ray.get(actor.generate.remote(texts, weights, version), timeout=TIMEOUT_S)
        assert ray.get(actor.ping.remote()) == version and {t.policy_version for t in trajs} == {version}
        data = collate(trajs, TOK.pad_id)
        mask = data.action_mask

        def logprobs(weights: dict) -> torch.Tensor:
            with torch.no_grad():
                return token_logprobs(
                    build_policy(start.config, weights), data.tokens, data.attention_mask, where=mask
                )[0][mask]

        behaviour = data.behaviour_logprobs[mask]
        assert (behaviour - logprobs(learned)).abs().max() < 1e-5  # the actor sampled with the learner's policy
        assert (behaviour - logprobs(state)).abs().max() > 1e-3  # and not with the one it started with
    finally:
        ray.kill(actor)
        group.shutdown()


# -- the router load-balancing loss (one process) ---------------------------------------------------
def test_router_balance_loss_is_transformers_load_balancing_loss():
    model = policy()
    data = collate(rollouts(model, 8), TOK.pad_id)
    _, _, router = token_logprobs_and_routing(model, data.tokens, data.attention_mask)
    e, k = model.config.num_experts, model.config.num_experts_per_tok
    ours, value = router_balance_loss(router, data.attention_mask, e, k)
    theirs = load_balancing_loss_func(router, e, k, data.attention_mask)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6)
    assert value == pytest.approx(float(theirs.detach()), rel=1e-6)
    gates = [p for n, p in model.named_parameters() if ".mlp.gate." in n]
    for a, b in zip(torch.autograd.grad(ours, gates, retain_graph=True), torch.autograd.grad(theirs, gates)):
        torch.testing.assert_close(a, b)


def router_grads(trainer):
    """The router gradients the last optimiser step used (guarded_step clears them only at the next)."""
    models = [("policy", trainer.policy)] + ([("critic", trainer.critic)] if hasattr(trainer, "critic") else [])
    return {f"{who}.{n}": p.grad.clone() for who, m in models for n, p in m.named_parameters() if ".mlp.gate." in n}


@pytest.mark.parametrize("kind", ["sao", "running_mean", "grpo"])
def test_router_aux_loss_coef_changes_the_router_gradient(kind):
    base = {
        "sao": {"episodes_per_update": 8, "value_warmup_updates": 0},
        "running_mean": {"episodes_per_update": 8},
        "grpo": {"group_size": 2, "episodes_per_update": 8},
    }[kind]
    batch = rollouts(policy(), 8, groups=2 if kind == "grpo" else 1)
    runs = {}
    for label, extra in (
        ("default", {}),
        ("off", {"router_aux_loss_coef": 0.0}),
        ("on", {"router_aux_loss_coef": 1.0}),
    ):
        trainer = CLASSES[kind](policy(), {**base, **extra}, pad_id=TOK.pad_id)
        runs[label] = (trainer.update(batch), router_grads(trainer))
    (_m_default, g_default), (m_off, g_off), (m_on, g_on) = runs["default"], runs["off"], runs["on"]
    assert g_default.keys() == g_on.keys() and any(k.startswith("policy.") for k in g_on)
    for key in g_default:
        assert torch.equal(g_default[key], g_off[key]), key  # 0 is the old behaviour, bit for bit
        assert not torch.equal(g_default[key], g_on[key]), key  # > 0 moves every router (the critic's too)
    assert "router_aux_loss" not in m_off and m_on["router_aux_loss"] > 0
    if kind == "sao":
        assert "critic_router_aux_loss" in m_on
    else:  # same parameters, same batch: the loss grows by exactly coef x L_aux
        assert m_on["policy_loss"] - m_off["policy_loss"] == pytest.approx(m_on["router_aux_loss"], rel=1e-5)


def test_router_aux_reads_each_familys_expert_count():
    """Mixtral names its experts num_local_experts, DeepSeek n_routed_experts: both must work, and a
    dense config with the loss switched on is an error naming the fields, not an AttributeError."""
    from transformers import LlamaConfig, MixtralConfig

    from trainers.router_balance import with_router_aux

    model = policy()
    data = collate(rollouts(model, 4), TOK.pad_id)
    _, _, router = token_logprobs_and_routing(model, data.tokens, data.attention_mask)
    e, k = model.config.num_experts, model.config.num_experts_per_tok
    want = float(load_balancing_loss_func(router, e, k, data.attention_mask).detach())
    zero = torch.zeros(())
    mixtral = MixtralConfig(num_local_experts=e, num_experts_per_tok=k, hidden_size=16, num_attention_heads=2)
    stats: dict = {}
    with_router_aux(zero, stats, 1.0, router, data.attention_mask, mixtral)
    assert stats["router_aux_loss"] == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="num_local_experts"):
        with_router_aux(zero, {}, 1.0, router, data.attention_mask, LlamaConfig(hidden_size=16, num_attention_heads=2))
