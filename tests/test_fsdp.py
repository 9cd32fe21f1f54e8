"""`learner_strategy: fsdp` on real parts: FSDP2's `fully_shard` per decoder layer in two gloo
processes, each holding half of every weight, must train as one process on the whole batch does,
for SAO (critic and KL reference sharded too), the running mean and GRPO, on the built policy and
on the tiny Qwen2-MoE (a shared expert, transformers' own forward), and for SAO on the built policy
with LoRA adapters, after several updates; and
their gathered state loads into fresh sharded ranks and into one process unchanged."""

import socket

import pytest
import torch
import torch.multiprocessing as mp

from testbed.runtimes.ray.learner import flat_state, shard_weights, split_batch
from tests.sharded_ranks import CONFIGS, run_rank, trainer
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
    """One spawn of two ranks for every case (starting the processes is most of the time)."""
    cases = []
    for model_name, kind in CASES:
        updates = []
        for batch in batches(kind, n=UPDATES):
            shards = split_batch(batch, 2, keep_groups=kind == "grpo")
            updates.append((shards, shard_weights(shards)))
        cases.append((model_name, kind, updates))
    out = tmp_path_factory.mktemp("fsdp") / "rank0.pt"
    mp.spawn(run_rank, args=(2, free_port(), cases, str(out)), nprocs=2, join=True)
    return cases, torch.load(out, weights_only=False)


@pytest.mark.parametrize(("model_name", "kind"), CASES)
def test_fsdp_on_two_ranks_equals_one_process(two_ranks, model_name, kind):
    cases, results = two_ranks
    got = results[(model_name, kind)]
    assert got["local_numel"] * 2 == got["full_numel"]  # each rank holds half of the weight
    single = trainer(model_name, kind)
    (updates,) = [u for m, k, u in cases if (m, k) == (model_name, kind)]
    for shards, _ in updates:
        want = single.update([t for shard in shards for t in shard])
    # parameters (policy, critic, the KL reference) and optimiser moments, to float rounding
    assert_close(flat_state(got["state"]), flat_state(single.state_dict()))
    assert single.version == got["state"]["version"] == UPDATES
    # a checkpoint moves between rank counts: 2 ranks' full state into 2 fresh ranks, bit for bit,
    # and into one process (the single trainer's own format)
    assert_same(flat_state(got["reloaded"]), flat_state(got["state"]))
    other = trainer(model_name, kind)
    other.load_state_dict(got["state"])
    assert_same(flat_state(other.state_dict()), flat_state(got["state"]))
    metrics = got["metrics"]
    assert metrics["nonfinite"] is None
    for key in ("policy_grad_norm", "grad_norm", "router_aux_loss", "critic_grad_norm"):
        if key in want:  # the diagnostics and batch statistics are the whole batch's
            assert metrics[key] == pytest.approx(want[key], rel=1e-4), key
