"""A lean full-sequence forward of the Qwen3-MoE backbone, for training (autograd) and for the
no-grad scoring passes (the KL reference, SAO's advantage pass).

Why: the trainers' forwards over a batch of ~32 x 60 tokens are a mix of real arithmetic (the
expert matmuls) and transformers' general machinery (mask building, attention dispatch, output
records) on a 2-core CPU. This computes the same function over the same parameters with fewer
ops, and runs the router and the experts on the real tokens only: the batch is right-padded
(trainers/batching.py), a padded position is never a key of a real one (causal mask), so the
~20-30% of positions that are padding change no real position's output and need no expert work.
Their hidden states are left at the attention output (never read: the trainers mask them).

Same maths as `Qwen3MoeModel.forward` (RMSNorm in float32, q/k norms, RoPE, causal SDPA with the
padding mask, top-k routing renormalised, the experts through transformers' own experts module):
equal to float rounding (tests/test_lean_forward.py). `supports` says which models qualify; the
callers fall back to transformers' forward for any other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from testbed.models.decoder import LeanDecoder
from testbed.models.modules import HFModule
from testbed.models.routing import expert_choice


def supports(backbone: HFModule) -> bool:
    """A `Qwen3MoeModel` of the shape the lean decoder knows (every layer MoE, no biases, ...)."""
    holder = type("Holder", (), {"config": getattr(backbone, "config", None)})()
    return getattr(backbone, "layers", None) is not None and LeanDecoder.supports(holder)


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm exactly as transformers' Qwen3MoeRMSNorm (float32 inside)."""
    x32 = x.float()
    out = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return out if weight is None else weight * out


def _rope_tables(backbone: HFModule, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    rotary = backbone.rotary_emb
    freqs = (
        torch.arange(length, dtype=torch.float, device=rotary.inv_freq.device)[:, None] * rotary.inv_freq.float()[None]
    )
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * rotary.attention_scaling).to(dtype), (emb.sin() * rotary.attention_scaling).to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _attention(
    layer: HFModule, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, eps: float
) -> torch.Tensor:
    attn = layer.self_attn
    B, T, _ = h.shape
    d = attn.head_dim
    q = _rms(F.linear(h, attn.q_proj.weight).view(B, T, -1, d), attn.q_norm.weight, eps).transpose(1, 2)
    k = _rms(F.linear(h, attn.k_proj.weight).view(B, T, -1, d), attn.k_norm.weight, eps).transpose(1, 2)
    v = F.linear(h, attn.v_proj.weight).view(B, T, -1, d).transpose(1, 2)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True)
    return F.linear(out.transpose(1, 2).reshape(B, T, -1), attn.o_proj.weight)


def _moe(moe: HFModule, h: torch.Tensor, forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse MoE block on real tokens [N, H]: (output [N, H], router logits [N, E]). `forced`
    [N, k]: routing replay's expert ids (testbed/models/routing.py), gate weights from the live router."""
    router = moe.gate
    logits = F.linear(h, router.weight)
    top, index = expert_choice(logits, router.top_k, router.norm_topk_prob, forced)
    return moe.experts(h, index, top.to(logits.dtype)), logits


def backbone_forward(
    backbone: HFModule,
    tokens: torch.Tensor,
    attention_mask: torch.Tensor,
    routing: bool = False,
    forced: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """(last hidden state [B, T, H], per-layer router logits [B*T, E] or None) of right-padded
    `tokens` [B, T]; positions where `attention_mask` is 0 hold unspecified values. `forced`
    [B, T, L, k]: the expert ids to replay (UNRECORDED where the router chooses itself)."""
    cfg = backbone.config
    B, T = tokens.shape
    eps = cfg.rms_norm_eps
    real = attention_mask.bool()
    rows = (real.reshape(-1).nonzero().squeeze(1),)  # the real positions of the flattened batch, once
    x = F.embedding(tokens, backbone.embed_tokens.weight)
    cos, sin = _rope_tables(backbone, T, x.dtype)
    # Causal within each row and never onto padding; every row sees itself, so no row is all-masked.
    causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    mask = ((causal[None] & real[:, None, :]) | torch.eye(T, dtype=torch.bool, device=tokens.device)[None])[:, None]
    routers = []
    for li, layer in enumerate(backbone.layers):
        x = x + _attention(layer, _rms(x, layer.input_layernorm.weight, eps), cos, sin, mask, eps)
        flat = x.reshape(B * T, -1)
        residual = flat[rows]
        replay = None if forced is None else forced[:, :, li].reshape(B * T, -1)[rows]
        out, logits = _moe(layer.mlp, _rms(residual, layer.post_attention_layernorm.weight, eps), replay)
        x = flat.index_put(rows, residual + out).view(B, T, -1)
        if routing:
            routers.append(logits.new_zeros(B * T, logits.shape[-1]).index_put(rows, logits))
    x = _rms(x, backbone.norm.weight, eps)
    return x, (tuple(routers) if routing else None)
