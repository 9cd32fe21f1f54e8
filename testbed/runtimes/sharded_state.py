"""Full (one-process) states from and into a trainer whose models FSDP2 shards.

A sharded trainer's `state_dict()` holds DTensors: every rank 1/W of each parameter and optimiser
moment. What leaves a learner (a published policy, a checkpoint, a state for a test to compare) is
the full state, the same format a single process writes, so it loads into any number of ranks.
Gathering is a collective: every rank calls these at the same point, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor


def is_sharded(module: nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in module.parameters())


def full_state(obj: Any) -> Any:
    """`obj` (nested dicts, lists, tuples, tensors, numbers) with every DTensor gathered to its full
    tensor; anything else unchanged. A collective when `obj` holds DTensors."""
    if isinstance(obj, DTensor):
        return obj.full_tensor()
    if isinstance(obj, dict):
        return {k: full_state(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(full_state(v) for v in obj)
    return obj


def published_policy(policy: nn.Module, rank: int, bucket_bytes: int | None = None) -> dict[str, torch.Tensor] | None:
    """The policy's full weights on the CPU for the rollout engines, on rank 0 (None elsewhere), as
    one dict. Sharded: gathered in buckets of about `bucket_bytes` (`published_buckets`); None: all
    at once by `get_model_state_dict(full_state_dict=True, cpu_offload=True)`, one parameter at a
    time, each moved to the CPU at once, so an accelerator never holds more than one full tensor.
    (The Ray learner publishes `published_buckets` one by one instead: no whole copy is assembled.)"""
    if is_sharded(policy):
        if bucket_bytes is not None:
            buckets = list(published_buckets(policy, rank, bucket_bytes))
            return {k: v for bucket in buckets for k, v in bucket.items()} if rank == 0 else None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v for k, v in state.items() if torch.is_tensor(v)} if rank == 0 else None
    if rank != 0:  # the others hold the same tensors; one copy travels
        return None
    return {k: v.detach().cpu() for k, v in policy.state_dict().items()}


def published_buckets(
    policy: nn.Module, rank: int, bucket_bytes: int | None, together: Sequence[Iterable[str]] = ()
) -> Iterator[dict[str, torch.Tensor]]:
    """The policy's full weights on rank 0's CPU, bucket by bucket (`bucket_keys`: about
    `bucket_bytes` each, all in one where None; the keys of each of `together` in one bucket).
    Sharded: `policy_buckets`, a collective (every rank iterates to the end; the others get empty
    dicts). Not sharded: rank 0 alone yields (a CPU copy of each bucket's tensors), the others nothing.
    A consumer that drops each bucket before taking the next holds one bucket of full tensors."""
    if is_sharded(policy):
        yield from policy_buckets(policy, bucket_bytes, together)
        return
    if rank != 0:  # the others hold the same tensors; one copy travels
        return
    state = {k: v.detach() for k, v in policy.state_dict().items()}
    sizes = {k: v.numel() * v.element_size() for k, v in state.items()}
    for keys in bucket_keys(sizes, bucket_bytes, together):
        yield {k: state[k].cpu() for k in keys}


def bucket_keys(
    sizes: dict[str, int], bucket_bytes: int | None, together: Sequence[Iterable[str]] = ()
) -> list[list[str]]:
    """Keys grouped so that each group's bytes stay within `bucket_bytes` (a larger unit alone; None:
    one group of all). A unit is a key, or the keys of one of `together` (LoRA's adapter pair and
    the base weight it merges into), placed where its first key is; units keep their order. Pure:
    every rank computes the same groups from the full sizes."""
    owner: dict[str, str] = {}  # key -> another key of its unit (groups that share a key join)
    for group in together:
        first, *rest = [*group] or [""]
        for key in rest:
            root, other = _root(owner, first), _root(owner, key)
            if root != other:
                owner[other] = root
    units: dict[str, list[str]] = {}
    for key in sizes:
        units.setdefault(_root(owner, key), []).append(key)
    buckets: list[list[str]] = []
    held = 0
    for unit in units.values():
        size = sum(sizes[k] for k in unit)
        if not buckets or (bucket_bytes is not None and held + size > bucket_bytes):
            buckets.append([])
            held = 0
        buckets[-1].extend(unit)
        held += size
    return [b for b in buckets if b]


def _root(owner: dict[str, str], key: str) -> str:
    while owner.get(key, key) != key:
        key = owner[key]
    return key


def policy_buckets(
    policy: nn.Module, bucket_bytes: int | None, together: Sequence[Iterable[str]] = ()
) -> Iterator[dict[str, torch.Tensor]]:
    """The sharded policy's full weights, bucket by bucket, on the CPU of rank 0 (empty dicts on
    the others): the state dict torch.distributed.checkpoint.state_dict gives (sharded, FQN keys),
    each bucket gathered and offloaded as `get_model_state_dict(full_state_dict=True,
    cpu_offload=True)` does with the whole of it (its own `_gather_state_dict`), so at most one
    bucket of full tensors is in flight. A collective: every rank iterates to the end."""
    from torch.distributed._state_dict_utils import _gather_state_dict
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = {k: v for k, v in get_model_state_dict(policy).items() if torch.is_tensor(v)}
    sizes = {k: v.numel() * v.element_size() for k, v in state.items()}  # a DTensor's numel is the full one
    for keys in bucket_keys(sizes, bucket_bytes, together):
        yield _gather_state_dict({k: state[k] for k in keys}, cpu_offload=True, ranks_only=(0,))


def _shard_like(value: Any, like: DTensor) -> Any:
    if isinstance(value, DTensor) or not torch.is_tensor(value) or value.shape != like.shape:
        return value
    # Every rank holds the full tensor: each keeps its own shard, no communication (src_data_rank None).
    return distribute_tensor(
        value.to(device=like.device, dtype=like.dtype), like.device_mesh, list(like.placements), src_data_rank=None
    )


def _load_full_module_state(module: nn.Module, state_dict: dict, prefix: str, *_: Any) -> None:
    for name, param in module.named_parameters():
        key = prefix + name
        if isinstance(param, DTensor) and key in state_dict:
            state_dict[key] = _shard_like(state_dict[key], param)


def _reshard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    for group in optimizer.param_groups:
        for param in group["params"]:
            if isinstance(param, DTensor) and param in optimizer.state:
                state = optimizer.state[param]
                for key, value in state.items():
                    state[key] = _shard_like(value, param)


def accept_full_states(modules: list[nn.Module], optimizers: list[torch.optim.Optimizer]) -> None:
    """Let the trainer's own `load_state_dict` take full states: each sharded module cuts its
    shard from a full tensor before loading, and each optimiser does the same for its moments
    after loading (the trainers' code stays the one-process code)."""
    for module in modules:
        if is_sharded(module):
            module.register_load_state_dict_pre_hook(_load_full_module_state)
    for optimizer in optimizers:
        optimizer.register_load_state_dict_post_hook(_reshard_optimizer_state)
