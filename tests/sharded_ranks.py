"""The rank processes of tests/test_fsdp.py: real torch.distributed (gloo) processes, started by
torch.multiprocessing's spawn, each importing this module (so it stays light: no Ray)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from testbed.models.lora import attach
from testbed.models.tiny_hub import build_model
from testbed.runtimes.learner_strategy import apply
from testbed.runtimes.sharded_checkpoint import load_sharded, save_sharded
from testbed.runtimes.sharded_state import full_state, policy_buckets, published_policy
from testbed.scenario.lora import LoraSettings
from testbed.scenario.sharding import FSDPConfig
from testbed.shard import shard_weight
from testbed.types import Verdict
from tests.test_trainers import TOK, policy
from trainers.grpo import GRPOTrainer
from trainers.running_mean import RunningMeanTrainer
from trainers.sao import SAOTrainer

CLASSES = {"sao": SAOTrainer, "running_mean": RunningMeanTrainer, "grpo": GRPOTrainer}
# What the sharded maths must get right: SAO with its critic (frozen attention) and the KL
# reference (sharded, no gradients); the running mean's window over the whole batch; GRPO's whole
# groups, two epochs and the router loss's global sums.
CONFIGS = {
    "sao": {"episodes_per_update": 8, "value_warmup_updates": 0, "value_pretrain_samples": 0, "kl_coef": 0.1},
    "running_mean": {"episodes_per_update": 8, "window": 6},
    "grpo": {"group_size": 2, "episodes_per_update": 8, "epochs": 2, "router_aux_loss_coef": 0.05},
}

# The sharded-checkpoint cases: two models and two optimisers (SAO, with an RNG in its other
# state), and the running mean's window on the other model family.
DCP_CASES = [("built", "sao"), ("qwen2_moe", "running_mean")]
# Micro-batching under FSDP2 (ranks with different micro-batch counts must agree on one): SAO,
# whose critic steps, value passes and policy step are all micro-batched (rank 0 runs a stand-in),
# and GRPO with the router loss (its whole-batch counts all-reduced before the micro-batches).
MICRO_CASES, MICRO_TOKENS = [("built", "sao"), ("built", "grpo")], 44  # rows of 17-25 tokens
MICRO_CASE = MICRO_CASES[0]
# A non-finite loss on one rank (rank 1's last episode's reward is nan) after the updates: both skip.
NAN_CASE = ("built", "grpo")


class _WordVocab:
    """What tiny_hub.build_model reads of a tokenizer, for the word tokenizer's vocabulary: the
    tiny Qwen2-MoE then scores the same trajectories as the built policy."""

    pad_token_id, eos_token_id = TOK.pad_id, TOK.eos_id

    def __len__(self) -> int:
        return TOK.vocab_size


def model(name: str) -> torch.nn.Module:
    """The built 0.57M-shape policy (Qwen3-MoE), with LoRA adapters (`built_lora`: policy.lora r 4 on
    attention and the fused experts), or the tiny Qwen2-MoE (shared expert), seeded."""
    if name == "built_lora":
        return attach(policy(seed=0), LoraSettings(r=4, alpha=8))
    return policy(seed=0) if name == "built" else build_model(_WordVocab(), seed=0)


def trainer(model_name: str, kind: str):
    return CLASSES[kind](model(model_name), CONFIGS[kind], pad_id=TOK.pad_id)


def sharded(model_name: str, kind: str, micro_batch_tokens: int | None = None):
    t = trainer(model_name, kind)
    t.micro_batch_tokens = micro_batch_tokens
    apply(t, "fsdp", FSDPConfig(param_dtype="float32"))  # float32: equality to float rounding
    return t


def extras(t, model_name: str, kind: str, updates: list, rank: int, dcp_dir: str) -> dict:
    """The sharded checkpoints (DCP_CASES), the published policy whole and in buckets (MICRO_CASE),
    the micro-batched training (MICRO_CASES) of a case, each None where the case has none."""
    name, out = f"{model_name}-{kind}", {"rest": None, "from_single": None, "published": None, "micro": None}
    out |= {"checkpointed": None, "bf16": None, "offload": None, "nan": None}
    if (model_name, kind) in DCP_CASES:
        out["rest"] = save_sharded(t, f"{dcp_dir}/ranks-{name}")
        from_single = sharded(model_name, kind)
        single_rest = torch.load(f"{dcp_dir}/single-{name}.rest.pt", weights_only=False)
        load_sharded(from_single, f"{dcp_dir}/single-{name}", single_rest)
        out["from_single"] = full_state(from_single.state_dict())
    if (model_name, kind) == MICRO_CASE:
        bucket = sum(v.numel() * v.element_size() for v in t.policy.state_dict().values()) // 5
        buckets = len(list(policy_buckets(t.policy, bucket)))
        out["published"] = (published_policy(t.policy, rank), published_policy(t.policy, rank, bucket), buckets)
        # the other FSDP settings on the same updates: activation checkpointing (float32), and
        # bfloat16 compute with float32 reductions (the default); offload is refused on the CPU
        for name, cfg in (
            ("checkpointed", FSDPConfig(param_dtype="float32", activation_checkpointing=True)),
            ("bf16", FSDPConfig(param_dtype="bfloat16", reduce_dtype="float32")),
        ):
            other = trainer(model_name, kind)
            apply(other, "fsdp", cfg)
            for shards, weights in updates:
                with shard_weight(weights[rank]):
                    other.update(shards[rank])
            out[name] = full_state(other.state_dict())
        try:
            apply(trainer(model_name, kind), "fsdp", FSDPConfig(offload=True))
        except ValueError as refused:
            out["offload"] = str(refused)
    if (model_name, kind) == NAN_CASE:
        shards, weights = copy.deepcopy(updates[-1])
        shards[1][-1].verdict = Verdict(quality=1, style_match=float("nan"), style="cute")  # rank 1's shard only
        before = full_state(t.state_dict())
        with shard_weight(weights[rank]):
            metrics = t.update(shards[rank])  # no deadlock: the ranks agree on skipping
        out["nan"] = (metrics, before, full_state(t.state_dict()))
    if (model_name, kind) in MICRO_CASES:
        micro = sharded(model_name, kind, MICRO_TOKENS)
        for shards, weights in updates:
            with shard_weight(weights[rank]):
                micro.update(shards[rank])
        out["micro"] = full_state(micro.state_dict())
    return out


def run_rank(rank: int, world: int, port: int, cases: list, out: str, dcp_dir: str) -> None:
    """Each case: (model, trainer kind, [per update: (shards, weights)]). Rank 0 writes, per case,
    the full trainer state, that state loaded into a fresh sharded trainer and gathered again, the
    last update's metrics, and the local size of one sharded weight. Sharded checkpoints (DCP) in
    `dcp_dir`: the ranks save theirs ("ranks-<case>"), and load one a single process wrote
    ("single-<case>", its other state in "single-<case>.rest.pt"), gathered as "from_single"."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = {}
        for model_name, kind, updates in cases:
            t = trainer(model_name, kind)
            apply(t, "fsdp", FSDPConfig(param_dtype="float32"))  # float32: equality to float rounding
            weight = t.policy.get_decoder().layers[0].self_attn.q_proj.weight
            assert isinstance(weight, DTensor)
            for shards, weights in updates:
                with shard_weight(weights[rank]):
                    metrics = t.update(shards[rank])
            state = full_state(t.state_dict())
            # a checkpoint's round trip: the full state loads into a fresh sharded trainer
            fresh = trainer(model_name, kind)
            apply(fresh, "fsdp", FSDPConfig(param_dtype="float32"))
            fresh.load_state_dict(state)
            reloaded = full_state(fresh.state_dict())
            extra = extras(t, model_name, kind, updates, rank, dcp_dir)
            results[(model_name, kind)] = {
                **extra,
                "state": state,
                "reloaded": reloaded,
                "metrics": metrics,
                "local_numel": weight.to_local().numel(),
                "full_numel": weight.numel(),
            }
        if rank == 0:
            torch.save(results, Path(out))
    finally:
        dist.destroy_process_group()
