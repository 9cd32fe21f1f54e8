"""How a data-parallel learner's ranks hold the trainer's models (`runtime.learner_strategy`), on
torch's own engines, applied to a trainer after it is built (so no trainer knows about it):

- `replicate`: DistributedDataParallel (its composable form, which keeps each module's class,
  attributes and state_dict keys) on every unit the trainers call (testbed/models/units.py) that
  has trainable parameters. Every rank holds everything.
- `fsdp`: FSDP2 `fully_shard` on every decoder layer, then on every called unit, of every model
  the trainer holds: the policy, the critic, and the KL reference (frozen: no gradients). Each
  rank holds 1/W of every parameter, gradient and optimiser moment.

Both engines average the ranks' gradients in backward; the trainers scale each rank's loss by its
share of the batch (trainers/data_parallel.py), so the average is the whole batch's gradient.
`fully_shard` replaces the parameters with sharded ones (DTensors): the trainers' optimisers,
built before, are pointed at the new parameters here (they hold no state yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from testbed.models.units import called_units, decoder_layers, is_tied, keep_output_recording
from testbed.runtimes.sharded_state import accept_full_states
from testbed.scenario.sharding import FSDPConfig

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def trainer_modules(trainer: Any) -> list[nn.Module]:
    """The models a trainer holds: its module attributes, and those of its helper objects (the KL
    reference's `model`), each once, in attribute order."""
    found: dict[int, nn.Module] = {}
    for value in vars(trainer).values():
        candidates = [value] if isinstance(value, nn.Module) else list(_helper_modules(value))
        for module in candidates:
            found.setdefault(id(module), module)
    return list(found.values())


def _helper_modules(value: Any) -> Iterator[nn.Module]:
    if isinstance(value, (str, bytes, int, float, bool, dict, list, tuple)) or value is None:
        return
    for inner in getattr(value, "__dict__", {}).values():
        if isinstance(inner, nn.Module):
            yield inner


def trainer_optimizers(trainer: Any) -> list[torch.optim.Optimizer]:
    return [v for v in vars(trainer).values() if isinstance(v, torch.optim.Optimizer)]


def micro_batching(trainer: Any, tokens: int | None) -> Any:
    """The trainer, set to backpropagate in micro-batches of `tokens` (runtime.micro_batch_tokens,
    trainers/micro_batch.py); refused, naming the setting, for a trainer that cannot."""
    if tokens is not None:
        if not hasattr(type(trainer), "micro_batch_tokens"):
            raise ValueError(
                f"runtime.micro_batch_tokens is {tokens} but {type(trainer).__name__} does not micro-batch "
                "(no micro_batch_tokens attribute); unset runtime.micro_batch_tokens"
            )
        trainer.micro_batch_tokens = tokens
    return trainer


def apply(trainer: Any, strategy: str, fsdp: FSDPConfig | None = None) -> None:
    """Hand the trainer's models to the strategy's engine; a no-op outside a process group of 2+."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    if strategy == "replicate":
        replicate_trainer(trainer)
    elif strategy == "fsdp":
        shard_trainer(trainer, fsdp or FSDPConfig.model_validate({}))
    else:
        raise ValueError(f"runtime.learner_strategy: unknown {strategy!r} (replicate or fsdp)")


def replicate_trainer(trainer: Any) -> None:
    from torch.distributed._composable.replicate import replicate

    for module in trainer_modules(trainer):
        for unit in called_units(module):
            if any(p.requires_grad for p in unit.parameters()):
                # A MoE rank may route no token to an expert: its parameter is then unused there.
                # Buffers (rotary tables) are equal constants: synced once at init, not before each forward.
                replicate(unit, find_unused_parameters=True, forward_sync_buffers=False)
                keep_output_recording(unit)


def shard_trainer(trainer: Any, cfg: FSDPConfig) -> None:
    from torch.distributed._composable import checkpoint
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    if cfg.offload and device == "cpu":  # FSDP2's CPUOffloadPolicy copies each layer to an accelerator to compute
        raise ValueError(
            "runtime.fsdp.offload: true needs learners on GPUs (it keeps weights and optimiser state on the host "
            "and computes on the device); these learners are on the CPU, where everything is on the host already: "
            "set runtime.fsdp.offload: false"
        )
    mesh = init_device_mesh(device, (dist.get_world_size(),))
    precision = MixedPrecisionPolicy(
        param_dtype=DTYPES[cfg.param_dtype] if cfg.param_dtype else None,
        reduce_dtype=DTYPES[cfg.reduce_dtype] if cfg.reduce_dtype else None,
    )
    offload = CPUOffloadPolicy() if cfg.offload else OffloadPolicy()

    def shard(unit: nn.Module) -> None:
        fully_shard(unit, mesh=mesh, mp_policy=precision, offload_policy=offload)

    modules = trainer_modules(trainer)
    before = {id(m): dict(m.named_parameters()) for m in modules}
    for module in modules:
        if is_tied(module):
            raise ValueError(
                "learner_strategy fsdp: this model ties its output layer to the input embedding "
                "(tie_word_embeddings); the trainers call the two apart, so use learner_strategy: replicate"
            )
        trains = any(p.requires_grad for p in module.parameters())
        for layer in decoder_layers(module):
            if cfg.activation_checkpointing and trains:
                checkpoint(layer)
            shard(layer)
        for unit in called_units(module):
            shard(unit)
            keep_output_recording(unit)
    renamed = {id(old): module.get_parameter(name) for module in modules for name, old in before[id(module)].items()}
    optimizers = trainer_optimizers(trainer)
    for optimizer in optimizers:
        if optimizer.state:
            raise RuntimeError("fully_shard must come before the first optimiser step (the state is per parameter)")
        for group in optimizer.param_groups:
            group["params"] = [renamed[id(p)] for p in group["params"]]
    accept_full_states(modules, optimizers)
