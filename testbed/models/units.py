"""Which parts of a model torch's distributed engines wrap, and whether one already does.

DDP (`replicate`) and FSDP2 (`fully_shard`) act through a module's forward hooks: they run only
when that module is *called*. The trainers never call a causal LM's root: they call its decoder
(`get_decoder()`) and its output layer on the scored positions alone (testbed/models/policy.py),
and the critic as a whole. So the units an engine wraps are the modules that are called, and a
backbone an engine manages must run transformers' own forward (module calls all the way down),
not the lean forward, which reads the weights directly (testbed/models/lean_forward.py).
"""

from __future__ import annotations

from typing import Any, cast

from torch import nn
from torch.distributed._composable.replicate import DDP as ReplicatedModule
from torch.distributed.fsdp import FSDPModule


def called_units(model: nn.Module) -> list[nn.Module]:
    """The modules the trainers call: a causal LM's decoder and (untied) output layer, else the
    model itself. A tied output layer shares the embedding's parameter, which the decoder's unit
    holds."""
    get_decoder = getattr(model, "get_decoder", None)
    get_output = getattr(model, "get_output_embeddings", None)
    if not (callable(get_decoder) and callable(get_output)):
        return [model]
    decoder, output = get_decoder(), get_output()
    if decoder is None or output is None:
        return [model]
    embed = decoder.get_input_embeddings() if hasattr(decoder, "get_input_embeddings") else None
    tied = embed is not None and getattr(embed, "weight", None) is getattr(output, "weight", object())
    return [decoder] if tied else [decoder, output]


def is_tied(model: nn.Module) -> bool:
    """Whether the output layer shares the input embedding's weight (`tie_word_embeddings`)."""
    units = called_units(model)
    return len(units) == 1 and units[0] is not model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks (`layers`) of a decoder, a causal LM (its `model`), a critic (its
    `backbone`) or a PEFT-wrapped causal LM (policy.lora: its `get_decoder()`)."""
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    for candidate in (model, getattr(model, "model", None), getattr(model, "backbone", None), decoder):
        layers = getattr(candidate, "layers", None)
        if isinstance(layers, nn.ModuleList):
            return list(layers)
    return []


def keep_output_recording(unit: nn.Module) -> None:
    """Let a wrapped transformers model still return its recorded outputs (router logits).

    DDP and FSDP2 give the module a new class (`DDPQwen3MoeModel`, `FSDPQwen3MoeModel`), and
    transformers looks up which outputs a model records by the class's name (a registry filled
    when the model was built): without this, `output_router_logits=True` returns none."""
    try:
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    except ImportError:  # another transformers: nothing to carry over
        return
    recorders = getattr(unit, "_can_record_outputs", None)
    if recorders:
        cast(Any, _CAN_RECORD_REGISTRY)[unit] = recorders  # keyed by the class's name


def engine_managed(module: nn.Module) -> bool:
    """Whether DDP (`replicate`) or FSDP2 (`fully_shard`) wraps this module or one inside it."""
    return any(isinstance(m, (ReplicatedModule, FSDPModule)) for m in module.modules())
