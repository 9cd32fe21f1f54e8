"""Routing through transformers' own MoE forward: forward hooks on its top-k routers that record
the expert ids, perturb the router's logits (the engine's `router_noise` / `router_rounding`) or
force replayed experts (`routing_replay`), for the models the lean forwards do not take (a LoRA
policy or critic, a data-parallel one, a Hub checkpoint of another family).

The routers hooked are transformers' top-k routers (`Qwen3MoeTopKRouter`, `MixtralTopKRouter`, ...):
modules with `weight` and `top_k` whose forward returns (logits [N, E], gate weights [N, k],
expert ids [N, k]) over the flattened tokens. A hook that changes the choice recomputes both from
the (perturbed) logits with `testbed.models.routing.expert_choice`, as those routers do (softmax,
top-k, renormalised where `norm_topk_prob`). Another router family is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from testbed.models.routing import expert_choice


def top_k_routers(model: nn.Module) -> list[nn.Module]:
    """The model's top-k routers in forward order (one per MoE layer)."""
    return [
        m
        for m in model.modules()
        if type(m).__name__.endswith("Router") and hasattr(m, "top_k") and hasattr(m, "weight")
    ]


@contextmanager
def router_hooks(
    model: nn.Module,
    perturb: Callable[[torch.Tensor], torch.Tensor] | None = None,
    forced: torch.Tensor | None = None,
    record: list[torch.Tensor] | None = None,
) -> Iterator[None]:
    """While inside: each router's logits go through `perturb`; `forced` [B, T, L, k] replaces the
    choice of layer l on rows without UNRECORDED (flattened as the router sees them, [B * T]);
    `record` receives each layer's expert ids [N, k] in forward order."""
    routers = top_k_routers(model)
    if (perturb is not None or forced is not None) and not routers:
        raise ValueError(
            f"{type(model).__name__}: no transformers top-k router found (a module named *Router with `top_k`), "
            "so its routing cannot be perturbed or replayed"
        )
    if forced is not None and forced.shape[2] != len(routers):
        raise ValueError(f"routing replay: {forced.shape[2]} layers recorded, the model has {len(routers)} routers")
    handles = [
        router.register_forward_hook(_hook(router, layer, perturb, forced, record))
        for layer, router in enumerate(routers)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _hook(
    router: nn.Module,
    layer: int,
    perturb: Callable[[torch.Tensor], torch.Tensor] | None,
    forced: torch.Tensor | None,
    record: list[torch.Tensor] | None,
) -> Callable[..., Any]:
    def hook(module: Any, args: Any, output: Any) -> Any:
        if not (isinstance(output, tuple) and len(output) == 3):
            raise ValueError(
                f"{type(module).__name__} does not return (logits, gate weights, expert ids): "
                "its routing cannot be recorded, perturbed or replayed"
            )
        logits, weights, index = output
        if perturb is not None or forced is not None:
            logits = perturb(logits) if perturb is not None else logits
            own = None if forced is None else forced[:, :, layer].reshape(-1, forced.shape[-1]).to(logits.device)
            top, index = expert_choice(logits, int(module.top_k), bool(getattr(module, "norm_topk_prob", True)), own)
            weights = top.to(weights.dtype)
        if record is not None:
            record.append(index.detach())
        return logits, weights, index

    return hook
