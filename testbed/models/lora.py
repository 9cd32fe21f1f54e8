"""LoRA adapters through PEFT (`policy.lora`, SAO's `critic_trainable: lora`).

The base weights stay frozen and the adapters learn: W + (alpha / r) x B A on each target. So:

- the KL reference is the same module with its adapters switched off (`adapters_disabled`): no
  second copy, and exactly the starting policy's log-probs (a disabled adapter is skipped, not
  multiplied by zero);
- what leaves the learner for a rollout engine is the merged policy (`merged_weights`): the base
  model's own state-dict keys, W + delta on every target, so an engine (HF, vLLM, a Ray actor) holds
  a plain model and needs no PEFT;
- the lean forward, which reads weights directly, is bypassed where adapters sit (`has_adapters`).

PEFT is imported only where adapters are built or merged (the `lora` extra).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterator
from typing import Any, Literal

import torch
from torch import nn

from testbed.extras import require_extra
from testbed.models.modules import EXPERTS, ModulePatterns, module_family
from testbed.scenario.lora import LoraSettings

PEFT_PREFIX = "base_model.model."  # a PeftModel's state-dict prefix before the base model's keys


def has_adapters(module: Any) -> bool:
    """Whether LoRA adapters sit anywhere in `module` (duck-typed: no PEFT import)."""
    return isinstance(module, nn.Module) and any(hasattr(m, "lora_A") for m in module.modules())


def _require_peft() -> None:
    require_extra("lora", "LoRA adapters (policy.lora, critic_trainable: lora)", ("peft",))


def _names(full: str, target: str) -> bool:
    """PEFT's match: the whole dotted name, or a suffix of it after a dot."""
    return full == target or full.endswith("." + target)


def split_targets(model: nn.Module, names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(Linear modules, parameters) among `names`, each a dotted suffix of a module or of a
    parameter (`experts.gate_up_proj`: a fused expert weight has no module of its own). A name that
    matches nothing is refused, naming the field."""
    modules = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    params = [n for n, p in model.named_parameters() if p.dim() in (2, 3)]
    linear, direct = [], []
    for name in names:
        found_module = any(_names(m, name) for m in modules)
        # a Linear's own weight is adapted through its module, not as a bare parameter
        found_param = any(_names(p, name) and p.rpartition(".")[0] not in modules for p in params)
        if found_module:
            linear.append(name)
        if found_param:
            direct.append(name)
        if not (found_module or found_param):
            sample = ", ".join(sorted({m.rpartition(".")[2] for m in modules})[:8])
            raise ValueError(
                f"policy.lora.target_modules: {name!r} names no Linear module or 2-D/3-D parameter of this "
                f"{getattr(getattr(model, 'config', None), 'model_type', 'model')} (Linear modules end in: {sample})"
            )
    return linear, direct


def check_dropout(settings: LoraSettings, direct: list[str]) -> None:
    if direct and settings.dropout > 0:
        raise ValueError(
            f"policy.lora.dropout is {settings.dropout:g} but {direct} are parameters (fused MoE experts), "
            "which PEFT adapts without dropout: set dropout: 0, or target only Linear modules"
        )


def lora_plan(model: nn.Module, settings: LoraSettings) -> dict[str, Any]:
    """What `--dry-run` shows of `policy.lora` on the (meta) policy: its targets checked, the adapters counted."""
    from testbed.models.memory import ModelShape, adapter_parameters

    linear, direct = split_targets(model, settings.target_modules)
    check_dropout(settings, direct)
    adapters = adapter_parameters(ModelShape.of(model), settings.target_modules, settings.r)
    return {**settings.model_dump(mode="json"), "targets": sorted({*linear, *direct}), "adapters": adapters}


def peft_config(settings: LoraSettings, linear: list[str], direct: list[str]) -> Any:
    _require_peft()
    from peft import LoraConfig

    check_dropout(settings, direct)
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=linear or None,
        target_parameters=direct or None,
        bias="none",
    )


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Adapters drawn from their own stream: the same on every learner rank and in every process
    of a seed, and the caller's random stream (what a run samples next) left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def attach(policy: nn.Module, settings: LoraSettings | None, seed: int = 0) -> nn.Module:
    """The policy with fresh adapters (B = 0: it computes exactly what it did; A drawn from `seed`),
    base frozen; the policy itself where `settings` is None. Wrapped in place (PEFT injects layers)."""
    if settings is None:
        return policy
    _require_peft()
    from peft import get_peft_model

    linear, direct = split_targets(policy, settings.target_modules)
    with seeded(seed):
        return get_peft_model(policy, peft_config(settings, linear, direct))


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """The base model under the adapters, in eval mode, for the length of the block."""
    was_training = model.training
    model.eval()
    try:
        with model.disable_adapter():  # type: ignore[operator]  # a PeftModel's context manager
            yield
    finally:
        model.train(was_training)


def merged_copy(model: nn.Module) -> nn.Module:
    """A plain copy of `model` with its adapters merged into the base weights (the model itself
    copied where it has none)."""
    if not has_adapters(model):
        return copy.deepcopy(model)
    return copy.deepcopy(model).merge_and_unload()  # type: ignore[operator]


# -- merging a state dict --------------------------------------------------------------------------

Layout = Literal["linear", "experts_in_out", "experts_out_in"]


@dataclasses.dataclass(frozen=True)
class MergeItem:
    """One adapter: the state-dict keys of its A and B, of the base tensor it updates, and how."""

    lora_a: str
    lora_b: str
    target: str
    scaling: float
    layout: Layout
    experts: int = 1


def merge_plan(model: nn.Module) -> list[MergeItem]:
    """Every active adapter of `model`, read once from its modules (the keys survive FSDP2 and a
    trip through Ray; a state dict alone does not say which fused weight a wrapper adapts)."""
    items = []
    for name, module in model.named_modules():
        if not hasattr(module, "lora_A") or not hasattr(module, "get_base_layer"):
            continue
        prefix = f"{name}." if name else ""
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            parameter = getattr(module, "parameter_name", None)
            layout: Layout
            if parameter is None:  # a Linear: its own base layer's weight
                target, layout, experts = f"{prefix}base_layer.weight", "linear", 1
            else:  # a fused parameter, possibly under further wrappers of the same module
                depth, inner = 1, module.base_layer
                while hasattr(inner, "lora_A"):
                    depth, inner = depth + 1, inner.base_layer
                target = prefix + "base_layer." * depth + parameter
                experts = module.num_experts
                layout = "experts_out_in" if module._did_swap_in_out_features else "experts_in_out"
                if experts == 1:
                    layout = "linear"
            items.append(
                MergeItem(
                    lora_a=f"{prefix}lora_A.{adapter}.weight",
                    lora_b=f"{prefix}lora_B.{adapter}.weight",
                    target=target,
                    scaling=float(module.scaling[adapter]),
                    layout=layout,
                    experts=experts,
                )
            )
    return items


def delta(a: torch.Tensor, b: torch.Tensor, item: MergeItem) -> torch.Tensor:
    """scaling x B A, shaped as the base tensor (PEFT's formulas: lora.Linear and lora.ParamWrapper).
    A fused expert weight has a rank-r pair per expert, stacked: A [r E, in], B [out, r E]."""
    if item.layout == "linear":
        return (b @ a) * item.scaling
    a3 = a.reshape(item.experts, -1, a.shape[-1])  # experts x rank x in
    b3 = b.reshape(b.shape[0], -1, item.experts)  # out x rank x experts
    pattern = "o r e, e r i -> e o i" if item.layout == "experts_out_in" else "o r e, e r i -> e i o"
    return torch.einsum(pattern, b3, a3) * item.scaling


def plain_key(key: str) -> str:
    """A PEFT state-dict key as the base model names it."""
    return key.removeprefix(PEFT_PREFIX).replace(".base_layer", "")


def merged_weights(state: dict[str, torch.Tensor], plan: list[MergeItem]) -> dict[str, torch.Tensor]:
    """The base model's state dict with every adapter merged: W + scaling x B A under W's own key,
    the adapters' keys dropped; tensors no adapter touches are passed through, not copied."""
    out = dict(state)
    for item in plan:
        a, b = out.pop(item.lora_a), out.pop(item.lora_b)
        base = out[item.target]
        out[item.target] = base + delta(a, b, item).to(base.dtype)
    return {plain_key(k): v for k, v in out.items()}


def merged_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s weights as a plain model's state dict, adapters merged (detached, on their device)."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    return merged_weights(state, merge_plan(model)) if has_adapters(model) else state


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a PeftModel (its class names the checkpoint's conversions)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) and has_adapters(model) else model


# -- the critic: adapters on the experts -----------------------------------------------------------


def expert_targets(backbone: nn.Module, patterns: ModulePatterns | None) -> tuple[list[str], list[str]]:
    """(Linear modules, parameters) of the backbone's experts, by full name: a shared expert's
    projections are Linear modules, the routed experts' fused weights are parameters."""
    linear = [
        n
        for n, m in backbone.named_modules()
        if isinstance(m, nn.Linear) and module_family(f".{n}.", patterns) == EXPERTS
    ]
    owned = set(linear)
    direct = [
        n
        for n, p in backbone.named_parameters()
        if p.dim() in (2, 3) and module_family(f".{n}", patterns) == EXPERTS and n.rpartition(".")[0] not in owned
    ]
    return linear, direct


def attach_to_experts(
    backbone: nn.Module, r: int, alpha: int, patterns: ModulePatterns | None, seed: int = 0
) -> nn.Module:
    """Inject adapters into the backbone's experts only (in place; the module keeps its class)."""
    _require_peft()
    from peft import LoraConfig, inject_adapter_in_model

    linear, direct = expert_targets(backbone, patterns)
    if not (linear or direct):
        raise ValueError("critic_trainable 'lora': no expert weight found (give SAO's critic_module_patterns)")
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=linear or None, target_parameters=direct or None)
    with seeded(seed):
        return inject_adapter_in_model(config, backbone)
