"""Update diagnostics shared by the trainers: gradient norms by module family (the paper's
pilot analysis) and MoE expert load."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from testbed.models.critic import module_family


def grad_norms_by_family(model: nn.Module, prefix: str, patterns=None) -> dict[str, float]:
    """L2 norm of the gradient per family (attention / experts / router / head / other) and in
    total; `patterns` (testbed.models.modules.ModulePatterns) name the families, default if None.
    Sharded gradients (FSDP2's DTensors) give the full gradient's norms: the squares of the local
    shards are summed over the mesh in one all-reduce."""
    families: list[str] = []
    local: list[torch.Tensor] = []
    mesh = None
    for name, param in model.named_parameters():
        if param.grad is None:
            continue
        grad = param.grad.detach()
        if isinstance(grad, DTensor):
            mesh, grad = grad.device_mesh, grad.to_local()
        families.append(module_family("." + name, patterns))
        local.append(grad.float().pow(2).sum())
    if mesh is not None:
        summed = torch.stack(local)
        dist.all_reduce(summed, group=mesh.get_group())
        local = list(summed)
    sq: dict[str, float] = {}
    for family, value in zip(families, local):
        sq[family] = sq.get(family, 0.0) + float(value)
    out = {f"{prefix}grad_norm_{family}": value**0.5 for family, value in sq.items()}
    out[f"{prefix}grad_norm"] = sum(sq.values()) ** 0.5
    return out


@torch.no_grad()
def expert_load(
    router_logits: tuple[torch.Tensor, ...] | None, token_mask: torch.Tensor, top_k: int, prefix: str
) -> dict[str, float]:
    """Share of routed (token, slot) pairs each expert receives over the masked tokens, summarised
    as the coefficient of variation across experts (0 = perfectly balanced) and the busiest
    expert's share relative to a uniform share (1 = balanced)."""
    if not router_logits:
        return {}
    flat_mask = token_mask.reshape(-1).bool()
    cvs, peaks = [], []
    for layer_logits in router_logits:
        chosen = layer_logits[flat_mask].topk(top_k, dim=-1).indices.reshape(-1)
        if chosen.numel() == 0:
            continue
        counts = torch.bincount(chosen, minlength=layer_logits.shape[-1]).float()
        share = counts / counts.sum()
        cvs.append(float(share.std(unbiased=False) / share.mean()))
        peaks.append(float(share.max() * share.numel()))
    if not cvs:
        return {}
    return {f"{prefix}expert_load_cv": sum(cvs) / len(cvs), f"{prefix}expert_load_peak": max(peaks)}


def first_action_values(values: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Each row's value at its first response (action) token: the critic's guess of the reward
    where the style is still to be chosen. A row without actions gives nan."""
    mask = action_mask.bool()
    first = mask.float().argmax(dim=1)
    out = values.gather(1, first[:, None]).squeeze(1).to(torch.float32)
    return torch.where(mask.any(dim=1), out, torch.full_like(out, float("nan")))


def first_value_metrics(values: torch.Tensor, action_mask: torch.Tensor, rewards: torch.Tensor) -> dict[str, float]:
    """The first-token values against the episodes' rewards: their mean and spread over the batch,
    and how much of the rewards' variance they explain (1 - Var(r - V0) / Var(r)). A spread near 0
    and an EV near 0 mean a state-independent baseline: what the running mean already is."""
    v0 = first_action_values(values.detach(), action_mask)
    ok = torch.isfinite(v0)
    v0, r = v0[ok], rewards.detach().to(torch.float32)[ok]
    if v0.numel() == 0:
        return {"first_value_mean": float("nan"), "first_value_std": float("nan"), "first_value_ev": float("nan")}
    var_r = r.var(unbiased=False)
    ev = float(1.0 - (r - v0).var(unbiased=False) / var_r) if var_r > 0 else float("nan")
    return {
        "first_value_mean": float(v0.mean()),
        "first_value_std": float(v0.std(unbiased=False)),
        "first_value_ev": ev,
    }


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation; nan when either side has no spread."""
    a, b = a - a.mean(), b - b.mean()
    denom = float(a.pow(2).sum().sqrt() * b.pow(2).sum().sqrt())
    return float((a * b).sum()) / denom if denom > 0 else float("nan")


@torch.no_grad()
def advantage_shrinkage(
    before: torch.Tensor, fitted: torch.Tensor, action_mask: torch.Tensor, rewards: torch.Tensor
) -> dict[str, float]:
    """How much fitting the critic to a batch's returns shrank the advantages it then scores:
    token-mean |A| from the critic before and after its K steps, their ratio (1 = untouched), and
    per critic the correlation over the batch between an episode's mean advantage and its own
    reward. A baseline pulled toward the returns it is subtracted from leaves smaller advantages
    that track the episode's own return less."""
    mask = action_mask.to(before.dtype)
    tokens = mask.sum().clamp(min=1)
    per_row = mask.sum(dim=1).clamp(min=1)
    r = rewards.detach().to(torch.float32)
    out: dict[str, float] = {}
    for name, adv in (("pre", before), ("fitted", fitted)):
        out[f"advantage_abs_{name}"] = float((adv.abs() * mask).sum() / tokens)
        out[f"advantage_return_corr_{name}"] = _corr(((adv * mask).sum(dim=1) / per_row).to(torch.float32), r)
    pre = out["advantage_abs_pre"]
    out["advantage_shrink"] = out["advantage_abs_fitted"] / pre if pre > 0 else float("nan")
    return out
