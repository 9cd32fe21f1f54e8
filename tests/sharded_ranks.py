"""The rank processes of tests/test_fsdp.py: real torch.distributed (gloo) processes, started by
torch.multiprocessing's spawn, each importing this module (so it stays light: no Ray)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from testbed.models.lora import attach
from testbed.models.tiny_hub import build_model
from testbed.runtimes.learner_strategy import apply
from testbed.runtimes.ray.shard import shard_weight
from testbed.runtimes.sharded_state import full_state
from testbed.scenario.lora import LoraSettings
from testbed.scenario.sharding import FSDPConfig
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


def run_rank(rank: int, world: int, port: int, cases: list, out: str) -> None:
    """Each case: (model, trainer kind, [per update: (shards, weights)]). Rank 0 writes, per case,
    the full trainer state, that state loaded into a fresh sharded trainer and gathered again, the
    last update's metrics, and the local size of one sharded weight."""
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
            results[(model_name, kind)] = {
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
