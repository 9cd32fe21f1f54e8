"""`learner_strategy: fsdp` on real parts: FSDP2's `fully_shard` per decoder layer in two gloo
processes, each holding half of every weight, must train as one process on the whole batch does,
for SAO (critic and KL reference sharded too), the running mean and GRPO, on the built policy and
on the tiny Qwen2-MoE (a shared expert, transformers' own forward), and for SAO on the built policy
with LoRA adapters, after several updates; and their state moves between rank counts: gathered full,
and as sharded checkpoints (torch.distributed.checkpoint) from 2 ranks into 1 process and from 1
process into 2 ranks."""

import socket

import pytest
import torch
import torch.multiprocessing as mp

from testbed.runtimes.ray.learner import flat_state, shard_weights, split_batch
from testbed.runtimes.sharded_checkpoint import load_sharded, save_sharded
from testbed.runtimes.sharded_state import bucket_keys
from tests.sharded_ranks import CONFIGS, DCP_CASES, MICRO_CASE, MICRO_CASES, NAN_CASE, run_rank, trainer
from tests.test_data_parallel import assert_close, assert_same, batches

MODELS = ["built", "qwen2_moe"]
# built_lora: policy.lora; SAO alone (its critic, and the KL reference as the policy with its adapters off)
CASES = [(m, k) for m in MODELS for k in CONFIGS] + [("built_lora", "sao")]
UPDATES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One spawn of two ranks for every case (starting the processes is most of the time). Before
    it, each case's single process trains on the whole batches and writes a sharded checkpoint for
    the ranks to load."""
    cases, singles = [], {}
    dcp_dir = tmp_path_factory.mktemp("dcp")
    for model_name, kind in CASES:
        updates, single = [], trainer(model_name, kind)
        for batch in batches(kind, n=UPDATES):
            shards = split_batch(batch, 2, keep_groups=kind == "grpo")
            updates.append((shards, shard_weights(shards)))
            want = single.update(batch)
        cases.append((model_name, kind, updates))
        singles[(model_name, kind)] = (flat_state(single.state_dict()), want)
        if (model_name, kind) in DCP_CASES:
            rest = save_sharded(single, dcp_dir / f"single-{model_name}-{kind}")
            torch.save(rest, dcp_dir / f"single-{model_name}-{kind}.rest.pt")
    out = tmp_path_factory.mktemp("fsdp") / "rank0.pt"
    mp.spawn(run_rank, args=(2, free_port(), cases, str(out), str(dcp_dir)), nprocs=2, join=True)
    return singles, torch.load(out, weights_only=False), dcp_dir


@pytest.mark.parametrize(("model_name", "kind"), CASES)
def test_fsdp_on_two_ranks_equals_one_process(two_ranks, model_name, kind):
    singles, results, _ = two_ranks
    got = results[(model_name, kind)]
    assert got["local_numel"] * 2 == got["full_numel"]  # each rank holds half of the weight
    single_state, want = singles[(model_name, kind)]
    # parameters (policy, critic, the KL reference) and optimiser moments, to float rounding
    assert_close(flat_state(got["state"]), single_state)
    assert single_state["version"] == got["state"]["version"] == UPDATES
    # a checkpoint moves between rank counts: 2 ranks' full state into 2 fresh ranks, bit for bit,
    # and into one process (the single trainer's own format)
    assert_same(flat_state(got["reloaded"]), flat_state(got["state"]))
    other = trainer(model_name, kind)
    other.load_state_dict(got["state"])
    assert_same(flat_state(other.state_dict()), flat_state(got["state"]))
    metrics = got["metrics"]
    assert metrics["nonfinite"] is None
    for key in ("policy_grad_norm", "router_aux_loss", "critic_grad_norm"):
        if key in want:  # the diagnostics and batch statistics are the whole batch's
            assert metrics[key] == pytest.approx(want[key], rel=1e-4), key


@pytest.mark.parametrize(("model_name", "kind"), DCP_CASES)
def test_sharded_checkpoints_reshard_between_two_ranks_and_one(two_ranks, model_name, kind):
    """DCP: the two ranks' shards load into one plain process, and one process's checkpoint into
    two sharded ranks, with every parameter and optimiser moment (and the rest) bit for bit."""
    singles, results, dcp_dir = two_ranks
    got = results[(model_name, kind)]
    written = dcp_dir / f"ranks-{model_name}-{kind}"
    assert sorted(p.name for p in written.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert not list(dcp_dir.glob("*.tmp"))  # renamed once complete
    assert "policy" not in got["rest"] and got["rest"]["version"] == UPDATES  # the models went to DCP
    one = trainer(model_name, kind)
    load_sharded(one, written, got["rest"])
    assert_same(flat_state(one.state_dict()), flat_state(got["state"]))
    assert_same(flat_state(got["from_single"]), singles[(model_name, kind)][0])


@pytest.mark.parametrize(("model_name", "kind"), MICRO_CASES)
def test_micro_batches_on_two_sharded_ranks_equal_whole_shards(two_ranks, model_name, kind):
    """runtime.micro_batch_tokens under FSDP2: each rank backpropagates its shard a few rows at a
    time (the ranks agreeing on the number of micro-batches), to the same update."""
    _, results, _ = two_ranks
    got = results[(model_name, kind)]
    assert_close(flat_state(got["micro"]), flat_state(got["state"]))


def test_activation_checkpointing_and_bfloat16_compute_on_two_ranks(two_ranks):
    """runtime.fsdp's other settings, SAO on the built policy, the same three updates on two ranks:
    activation checkpointing (recompute each decoder layer in backward) gives the float32 run's
    state; bfloat16 compute with float32 reductions keeps float32 weights and moments and takes
    nearly the float32 run's steps, visibly rounded; offload is refused on CPU learners, by name."""
    _, results, _ = two_ranks
    got = results[MICRO_CASE]
    float32 = flat_state(got["state"])
    assert_close(flat_state(got["checkpointed"]), float32)
    bf16, start = flat_state(got["bf16"]), flat_state(trainer(*MICRO_CASE).state_dict())
    keys = [k for k in float32 if k.startswith(("policy/", "critic/")) and torch.is_tensor(float32[k])]
    keys = [k for k in keys if float32[k].is_floating_point()]
    assert {bf16[k].dtype for k in keys} == {torch.float32}  # the sharded master weights stay float32
    want = torch.cat([(float32[k] - start[k]).flatten() for k in keys])
    step = torch.cat([(bf16[k] - start[k]).flatten() for k in keys])
    assert torch.isfinite(step).all() and float(want.norm()) > 0
    assert float(torch.nn.functional.cosine_similarity(step, want, dim=0)) > 0.98
    assert 1e-4 < float((step - want).norm() / want.norm()) < 0.25  # bfloat16 rounding, not float32's
    assert "runtime.fsdp.offload" in got["offload"]


def test_a_nonfinite_loss_on_one_sharded_rank_skips_the_step_on_both(two_ranks):
    """The finiteness agreement under FSDP2: rank 1's loss is nan (one reward), rank 0's is finite;
    both skip the step (one all-reduced flag before backward), so nothing moves but the skip count."""
    _, results, _ = two_ranks
    metrics, before, after = results[NAN_CASE]["nan"]
    assert metrics["nonfinite"] == "policy loss" and metrics["skipped_steps"] == 1
    assert torch.isfinite(torch.tensor(metrics["policy_loss"]))  # rank 0's own loss: it skipped for rank 1's
    assert_same(flat_state(after), {**flat_state(before), "skipped_steps_total": 1})


def test_bucket_keys_by_hand():
    sizes = {"a": 4, "b": 4, "c": 10, "d": 1, "e": 7}
    assert bucket_keys(sizes, 8) == [["a", "b"], ["c"], ["d", "e"]]  # c, larger than a bucket, alone
    assert bucket_keys(sizes, 100) == [["a", "b", "c", "d", "e"]]
    assert bucket_keys({}, 8) == []
    assert bucket_keys(sizes, None) == [["a", "b", "c", "d", "e"]]  # publish_bucket_mb null: one bucket
    # keys that travel together (a LoRA pair and its base weight) form one unit, where its first key is
    assert bucket_keys(sizes, 8, [("b", "e")]) == [["a"], ["b", "e"], ["c"], ["d"]]
    assert bucket_keys(sizes, 8, [("b", "e"), ("e", "d")]) == [
        ["a"],
        ["b", "d", "e"],
        ["c"],
    ]  # groups sharing a key join


def test_the_policy_gathered_in_buckets_equals_the_whole_gather(two_ranks):
    """The published policy of two FSDP2 ranks, gathered with torch.distributed.checkpoint.state_dict
    (full_state_dict, cpu_offload) in 3+ buckets (of a fifth of its bytes), is the one-call gather, tensor for tensor."""
    _, results, _ = two_ranks
    whole, bucketed, buckets = results[MICRO_CASE]["published"]
    assert buckets >= 3 and list(bucketed) == list(whole)
    assert_same(bucketed, whole)
    assert all(v.device.type == "cpu" and not hasattr(v, "device_mesh") for v in bucketed.values())
