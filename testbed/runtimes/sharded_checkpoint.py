"""Sharded checkpoints of a trainer with torch.distributed.checkpoint (DCP).

Under `learner_strategy: fsdp` each rank holds 1/W of every parameter and optimiser moment. A
sharded checkpoint has every rank write its own shards into one directory (DCP: a file per rank
and a `.metadata` index), so no process ever holds a whole model's AdamW state. DCP reshards on
load: the same directory loads into any number of ranks, one plain process included.

What goes to DCP: the trainer's models and optimisers, found by attribute (`policy`, `critic`,
`policy_opt`, `critic_opt` ...), through `torch.distributed.checkpoint.state_dict`'s
`get_state_dict` / `set_state_dict` (optimiser state keyed by parameter name, not by position).
The rest of `trainer.state_dict()` (version, counters, the running mean's window, RNGs) is small
and goes into the driver's checkpoint file as before (testbed/runtimes/checkpoint.py), with the
directory's name. This works for a trainer whose `state_dict()` keeps each model and optimiser
under its attribute name, as every built-in trainer does; any other is saved whole, gathered.

Atomicity: the ranks write into `<dir>.tmp`; when every rank is done rank 0 renames it to
`<dir>` (a fresh name per checkpoint), and only then does the driver write the checkpoint file
that names it. A crash at any point leaves the previous checkpoint whole.
Every function here is a collective where the models are sharded: all ranks call it together.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

MODELS, OPTIMIZERS = "models", "optimizers"


def tensor_parts(trainer: Any) -> tuple[dict[str, nn.Module], dict[str, torch.optim.Optimizer]] | None:
    """The trainer's models and optimisers by attribute name, if its `state_dict()` holds each
    under that name (else None: DCP cannot split it, the caller saves it whole)."""
    modules = {k: v for k, v in vars(trainer).items() if isinstance(v, nn.Module)}
    optimizers = {k: v for k, v in vars(trainer).items() if isinstance(v, torch.optim.Optimizer)}
    keys = set(trainer.state_dict())
    if not modules or not (set(modules) | set(optimizers)) <= keys:
        return None
    return modules, optimizers


def _dcp_state(modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """The models' and optimisers' state as DCP saves and loads it: sharded tensors (DTensors)
    where sharded, the optimisers' moments keyed by parameter name. An optimiser without state yet
    gets it initialised (a zero step), so a fresh trainer has the slots a checkpoint loads into."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    # One container so that an optimiser's parameters are named whichever model they belong to.
    model_state, optim_state = get_state_dict(nn.ModuleDict(modules), list(optimizers.values()))
    return {MODELS: model_state, OPTIMIZERS: optim_state}


@contextmanager
def _one_process_quietly() -> Iterator[None]:
    """DCP warns that it assumes one process when there is no process group: that is intended here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_sharded(trainer: Any, directory: str | Path) -> dict[str, Any]:
    """Write the trainer's models and optimisers to `directory` (which must not exist yet), each
    rank its own shards; returns the rest of the trainer's state (no tensors of the models)."""
    import torch.distributed.checkpoint as dcp

    parts = tensor_parts(trainer)
    if parts is None:
        raise ValueError(f"{type(trainer).__name__}.state_dict() does not hold its models under their attribute names")
    modules, optimizers = parts
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    with _one_process_quietly():
        dcp.save(_dcp_state(modules, optimizers), checkpoint_id=str(tmp))
    _barrier()  # every rank's files are written (DCP's own commit writes .metadata on rank 0)
    if _rank() == 0:
        os.replace(tmp, directory)
    _barrier()  # no rank reports done before the directory has its final name
    skip = set(modules) | set(optimizers)
    return {k: v for k, v in trainer.state_dict().items() if k not in skip}


def load_sharded(trainer: Any, directory: str | Path, rest: dict[str, Any]) -> None:
    """Load a checkpoint written by `save_sharded` (with any number of ranks) into this trainer,
    sharded or not, then the rest of its state through the trainer's own `load_state_dict`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    parts = tensor_parts(trainer)
    if parts is None:
        raise ValueError(f"{type(trainer).__name__} cannot load a sharded checkpoint (see save_sharded)")
    modules, optimizers = parts
    state = _dcp_state(modules, optimizers)
    with _one_process_quietly():  # DCP reshards: each rank reads the pieces of its shards
        dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(
        nn.ModuleDict(modules),
        list(optimizers.values()),
        model_state_dict=state[MODELS],
        optim_state_dict=state[OPTIMIZERS],
    )
    # The trainer's own load (version, window, RNG ...), its models and optimisers given their
    # own, just-loaded states (a no-op for them), so the trainer needs no DCP-specific code.
    own = {k: m.state_dict() for k, m in modules.items()} | {k: o.state_dict() for k, o in optimizers.items()}
    trainer.load_state_dict({**rest, **own})
