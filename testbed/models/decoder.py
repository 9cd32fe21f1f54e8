"""A lean incremental forward of the Qwen3-MoE policy, for sampling only (no autograd).

Why: on a 2-core CPU the policy's arithmetic is tiny (~0.6M parameters) and transformers'
general forward costs far more in Python and op dispatch per decoding step than in maths
(benchmarks/README.md has the profile). This module computes the same function over the same
parameter tensors (read live from the HF module, so a trainer's update is seen at the next
`generate`) with a handful of fused ops per layer:
  - a static, preallocated KV cache written in place (no concatenation per step);
  - RoPE cos/sin read from a table instead of recomputed per step;
  - q/k/v as one matmul, q_norm/k_norm as one `rms_norm` on the concatenated heads;
  - for one query token, GQA attention with the query heads packed per key/value head;
  - the experts of a layer as two dense matmuls over all experts with the routing weights (zero
    off the top-k) applied in between: at a few dozen tokens per step this is far cheaper than
    sorting tokens into groups, and it is the same sum (an unselected expert adds exactly 0).
Results match the HF forward to float rounding (tests/test_decoder.py); the behaviour log-probs
that DIS needs are computed from these logits, so they are the engine's exact sampling law.

Only the shape the testbed builds is supported (every layer MoE, no sliding window, no biases);
`LeanDecoder.supports(model)` says so and the engine falls back to the HF forward otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from testbed.models.modules import HFModule
from testbed.models.routing import expert_choice


class LeanDecoder:
    def __init__(self, model: HFModule):
        cfg = model.config
        self.model = model
        self.cfg = cfg
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.top_k, self.n_experts = cfg.num_experts_per_tok, cfg.num_experts
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        rotary = model.model.rotary_emb
        self.inv_freq, self.rope_scale = rotary.inv_freq, rotary.attention_scaling
        self._rope_len = 0
        self._cos = self._sin = self._sin_signed = torch.empty(0, device=self.inv_freq.device)  # built by _rope
        # The engine's routing mismatch (testbed/models/routing.py, RouterPerturbation): None = off.
        self.router_perturb: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.routed: list[torch.Tensor] = []  # the last forward's expert ids, one [rows(, S), k] per layer

    @staticmethod
    def supports(model: HFModule) -> bool:
        cfg: Any = getattr(model, "config", None)
        return (
            getattr(cfg, "model_type", None) == "qwen3_moe"
            and cfg.decoder_sparse_step == 1
            and not cfg.mlp_only_layers
            and getattr(cfg, "sliding_window", None) is None
            and not cfg.attention_bias
            and cfg.hidden_act == "silu"
            and cfg.rope_parameters.get("rope_type", "default") == "default"
        )

    # -- per-batch preparation ----------------------------------------------------------------

    def _rope(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for positions 0..length-1, computed exactly as the HF rotary embedding does."""
        if length > self._rope_len or self._cos.device != self.inv_freq.device:
            freqs = (
                torch.arange(length, dtype=torch.float, device=self.inv_freq.device)[:, None]
                * self.inv_freq.float()[None]
            )
            emb = torch.cat((freqs, freqs), dim=-1)
            dtype = self.model.model.embed_tokens.weight.dtype  # as HF casts them to the activations' dtype
            self._cos, self._sin = (emb.cos() * self.rope_scale).to(dtype), (emb.sin() * self.rope_scale).to(dtype)
            # rotate_half(x) * sin == roll(x, half) * [-sin, sin]: one op fewer per step and layer
            half = self._sin.shape[-1] // 2
            self._sin_signed = torch.cat((-self._sin[:, :half], self._sin[:, half:]), dim=-1)
            self._rope_len = length
        return self._cos, self._sin

    def _layer_weights(self) -> list[dict[str, torch.Tensor]]:
        """Fused views of each layer's weights, rebuilt per batch (the trainer moves them between)."""
        out = []
        for layer in self.model.model.layers:
            attn, moe = layer.self_attn, layer.mlp
            gate_up, down = moe.experts.gate_up_proj, moe.experts.down_proj  # [E, 2I, H], [E, H, I]
            E, two_i, H = gate_up.shape
            out.append(
                {
                    "ln1": layer.input_layernorm.weight,
                    "ln2": layer.post_attention_layernorm.weight,
                    "qkv": torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                    "qk_norm": torch.cat(
                        [attn.q_norm.weight.expand(self.n_heads, -1), attn.k_norm.weight.expand(self.n_kv, -1)]
                    ),
                    "o": attn.o_proj.weight,
                    "router": moe.gate.weight,
                    # x @ gate_up_all -> [N, E * 2I]; (a * w) @ down_all sums the experts in the matmul
                    "gate_up_all": gate_up.permute(2, 0, 1).reshape(H, E * two_i),
                    "down_all": down.permute(0, 2, 1).reshape(E * (two_i // 2), H),
                }
            )
        return out

    def _step_weights(self, layers: list[dict[str, torch.Tensor]]) -> dict:
        """The single-token path's weights: each RMSNorm's weight folded into the matmul that
        reads the normed vector (w * x_hat @ W^T = x_hat @ (W * w)^T) and the attention scale
        into the q norm, so a decoding step runs fewer ops (the same function, up to rounding)."""
        d = self.head_dim
        per_layer = []
        for w in layers:
            qk_norm = w["qk_norm"].clone()
            qk_norm[: self.n_heads] *= self.scale
            per_layer.append(
                {
                    "qkv": w["qkv"] * w["ln1"][None],
                    "qk_norm": qk_norm,
                    "o_t": w["o"].t(),
                    "router": w["router"] * w["ln2"][None],
                    "gate_up_all": w["gate_up_all"] * w["ln2"][:, None],
                    "down_all": w["down_all"],
                }
            )
        head = self.model.lm_head.weight * self.model.model.norm.weight[None]
        half = d // 2
        return {"layers": per_layer, "head_t": head.t(), "half": half}

    # -- the forward --------------------------------------------------------------------------

    @torch.no_grad()
    def start(self, input_ids: torch.Tensor, attention: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Prefill left-padded prompts [B, W] and allocate the cache for `max_new_tokens` more
        steps; returns the logits at the last prompt position [B, V]."""
        B, W = input_ids.shape
        self.weights = self._layer_weights()
        self.step_weights = self._step_weights(self.weights)
        length = W + max_new_tokens
        dtype = self.model.model.embed_tokens.weight.dtype
        device = input_ids.device
        self.k_cache = torch.zeros(len(self.weights), B, self.n_kv, length, self.head_dim, dtype=dtype, device=device)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.valid = torch.zeros(B, 1, 1, length, dtype=torch.bool, device=device)
        self.valid[:, 0, 0, :W] = attention.bool()
        positions = (attention.cumsum(1) - 1).clamp(min=0)
        self.next_position = positions[:, -1] + 1
        self.cursor = W
        cos, sin = self._rope(int(positions.max()) + max_new_tokens + 1)
        # Causal and padding mask; every row may see itself, so a padding row is never all-masked (NaN).
        causal = torch.ones(W, W, dtype=torch.bool, device=device).tril()
        mask = (causal[None] & attention.bool()[:, None, :]) | torch.eye(W, dtype=torch.bool, device=device)[None]
        return self._forward(input_ids, cos[positions], sin[positions], mask[:, None], slice(0, W))[:, -1]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row [B] (at the next cache column); returns the next logits [B, V]."""
        col = self.cursor
        self.valid[:, 0, 0, col] = True
        pos = self.next_position
        logits = self._step_forward(tokens, pos, col)
        self.cursor += 1
        self.next_position = pos + 1
        return logits

    def _step_forward(self, tokens: torch.Tensor, pos: torch.Tensor, col: int) -> torch.Tensor:
        """One token per row [B] at cache column `col`: logits [B, V]. `_forward`'s maths for
        S = 1 with the folded weights of `_step_weights` and 2-D activations throughout."""
        sw, eps = self.step_weights, self.eps
        B, nh, nkv, d, half = tokens.shape[0], self.n_heads, self.n_kv, self.head_dim, self.step_weights["half"]
        cos, sin = self._cos[pos][:, None], self._sin_signed[pos][:, None]  # [B, 1, d]
        # Additive mask, once per step for every layer: 0 on the columns a row may see, -inf elsewhere.
        bias = torch.zeros(self.valid.shape[0], 1, 1, col + 1, device=self.valid.device)
        bias.masked_fill_(~self.valid[..., : col + 1], float("-inf"))
        x = F.embedding(tokens, self.model.model.embed_tokens.weight)  # [B, H]
        self.routed = []
        for li, w in enumerate(sw["layers"]):
            qkv = F.linear(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), w["qkv"]).view(B, nh + 2 * nkv, d)
            qk = qkv[:, : nh + nkv]
            qk = qk * torch.rsqrt(qk.pow(2).mean(-1, keepdim=True) + eps) * w["qk_norm"]
            qk = qk * cos + qk.roll(half, -1) * sin
            self.k_cache[li, :, :, col] = qk[:, nh:]
            self.v_cache[li, :, :, col] = qkv[:, nh + nkv :]
            keys, values = self.k_cache[li, :, :, : col + 1], self.v_cache[li, :, :, : col + 1]
            scores = qk[:, :nh].reshape(B, nkv, nh // nkv, d) @ keys.transpose(-1, -2)
            attn = ((scores + bias).softmax(-1) @ values).reshape(B, nh * d)
            x = torch.addmm(x, attn, w["o_t"])
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            x = torch.addmm(x, self._step_experts(h, w), w["down_all"])
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)) @ sw["head_t"]

    def _step_experts(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        """The routed, activated expert inputs [N, E * I] (the down matmul sums them): softmax over
        the top-k logits equals the top-k probabilities renormalised."""
        logits = F.linear(h, w["router"])
        if self.router_perturb is not None:
            top, index = expert_choice(self.router_perturb(logits), self.top_k, self.cfg.norm_topk_prob)
            top = top.to(logits.dtype)
        elif self.cfg.norm_topk_prob:
            top, index = logits.topk(self.top_k, dim=-1)
            top = top.softmax(-1)
        else:
            top, index = logits.softmax(-1).topk(self.top_k, dim=-1)
        self.routed.append(index)
        routing = torch.zeros_like(logits).scatter_(1, index, top)
        gate_up = (h @ w["gate_up_all"]).view(h.shape[0], self.n_experts, 2, -1)
        return (F.silu(gate_up[:, :, 0]) * gate_up[:, :, 1] * routing[:, :, None]).reshape(h.shape[0], -1)

    @torch.no_grad()
    def keep(self, rows: torch.Tensor) -> None:
        """Carry on with these rows of the batch only (indices into the current rows): rows that
        finished cost nothing more. Each row's computation is its own, so the others are unchanged."""
        self.k_cache, self.v_cache = self.k_cache[:, rows], self.v_cache[:, rows]
        self.valid, self.next_position = self.valid[rows], self.next_position[rows]

    def _forward(
        self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cols: slice
    ) -> torch.Tensor:
        B, S = ids.shape
        nh, nkv, d = self.n_heads, self.n_kv, self.head_dim
        x = F.embedding(ids, self.model.model.embed_tokens.weight)
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, S, D]: broadcast over heads
        half = d // 2
        self.routed = []
        for li, w in enumerate(self.weights):
            h = F.rms_norm(x, (x.shape[-1],), w["ln1"], self.eps)
            qkv = F.linear(h, w["qkv"]).view(B, S, nh + 2 * nkv, d)
            qk = F.rms_norm(qkv[:, :, : nh + nkv], (d,), None, self.eps) * w["qk_norm"]
            qk = qk.transpose(1, 2)  # [B, nh + nkv, S, d]
            rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = qk * cos + rotated * sin
            q, k = qk[:, :nh], qk[:, nh:]
            self.k_cache[li, :, :, cols] = k
            self.v_cache[li, :, :, cols] = qkv[:, :, nh + nkv :].transpose(1, 2)
            keys = self.k_cache[li, :, :, : cols.stop]
            values = self.v_cache[li, :, :, : cols.stop]
            if S == 1:  # pack the query heads of each kv head; two matmuls beat SDPA's CPU kernel at one query
                scores = (q.reshape(B, nkv, nh // nkv, d) @ keys.transpose(-1, -2)) * self.scale
                probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
                attn = (probs @ values).reshape(B, 1, nh * d)
            else:
                attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
                attn = attn.transpose(1, 2).reshape(B, S, nh * d)
            x = x + F.linear(attn, w["o"])
            h = F.rms_norm(x, (x.shape[-1],), w["ln2"], self.eps).reshape(B * S, -1)
            x = x + self._experts(h, w).view(B, S, -1)
            self.routed[-1] = self.routed[-1].view(B, S, -1)
        x = F.rms_norm(x, (x.shape[-1],), self.model.model.norm.weight, self.eps)
        return F.linear(x, self.model.lm_head.weight)

    def _experts(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = F.linear(h, w["router"])
        if self.router_perturb is not None:
            logits = self.router_perturb(logits)
        top, index = expert_choice(logits, self.top_k, self.cfg.norm_topk_prob)  # float32, as HF's router
        self.routed.append(index)
        routing = torch.zeros(h.shape[0], self.n_experts, dtype=top.dtype, device=h.device)
        routing = routing.scatter_(1, index, top).to(h.dtype)  # [N, E], zero off the top-k
        gate_up = (h @ w["gate_up_all"]).view(h.shape[0], self.n_experts, 2, -1)
        act = F.silu(gate_up[:, :, 0]) * gate_up[:, :, 1] * routing[:, :, None]
        return act.reshape(h.shape[0], -1) @ w["down_all"]

    def routing(self) -> torch.Tensor:
        """The last `start` or `step`'s expert ids: [B, S, L, k] after `start`, [rows, L, k] after `step`."""
        return torch.stack(self.routed, dim=-2)
