"""The policy: a small Qwen3-MoE causal LM built from a config (no download), and the one
function every trainer and test uses to score tokens under it."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from testbed.models import lean_forward
from testbed.models.lora import has_adapters
from testbed.models.modules import HFModule
from testbed.models.router_hooks import router_hooks
from testbed.models.tokenizer import WordTokenizer
from testbed.models.units import engine_managed
from testbed.scenario.schema import PolicyConfig


def build_policy(cfg: PolicyConfig, tokenizer: WordTokenizer, seed: int = 0) -> Qwen3MoeForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.expert_size * 2,
        moe_intermediate_size=cfg.expert_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.hidden_size // cfg.num_heads,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.top_k,
        decoder_sparse_step=1,  # every layer is MoE
        norm_topk_prob=True,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_id,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        output_router_logits=False,
    )
    return Qwen3MoeForCausalLM(config)


def count_parameters(model: HFModule, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def token_logprobs(
    model: HFModule,
    tokens: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    where: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each token given its prefix, and the entropy of each position's
    distribution, both [B, T] and aligned with `tokens` (position 0 gets 0: it has no prefix).

    The temperature must be the engine's, so that these equal the behaviour log-probs. With
    `where` (bool [B, T], e.g. the action mask) only those tokens are scored and the rest are 0:
    the output layer and its softmax then run on those positions only, which is most of the
    saving for a small model with a large vocabulary.
    """
    logp, entropy, _ = token_logprobs_and_routing(
        model, tokens, attention_mask, temperature, routing=False, where=where
    )
    return logp, entropy


def token_logprobs_and_routing(
    model: HFModule,
    tokens: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    routing: bool = True,
    where: torch.Tensor | None = None,
    forced: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """`token_logprobs` plus the router logits of every MoE layer (for expert-load diagnostics),
    all from one forward pass. `forced` [B, T, L, k]: routing replay's expert ids (`hidden_states`)."""
    hidden, router = hidden_states(model.get_decoder(), tokens, attention_mask, routing, forced)
    hidden = hidden[:, :-1]  # the state at t-1 predicts token t
    need = torch.ones_like(tokens[:, 1:], dtype=torch.bool) if where is None else where[:, 1:].bool()
    logits = model.get_output_embeddings()(hidden[need])
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)
    picked = logp_all.gather(-1, tokens[:, 1:][need][:, None]).squeeze(-1)
    with torch.no_grad():  # a diagnostic only: no graph for it
        entropy_picked = -(logp_all.exp() * logp_all).sum(-1)
    zeros = torch.zeros(tokens.shape[0], tokens.shape[1], dtype=picked.dtype, device=tokens.device)
    logp = zeros.masked_scatter(F.pad(need, (1, 0)), picked)
    entropy = zeros.masked_scatter(F.pad(need, (1, 0)), entropy_picked)
    return logp, entropy, router


def hidden_states(
    backbone: HFModule,
    tokens: torch.Tensor,
    attention_mask: torch.Tensor,
    routing: bool = False,
    forced: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple | None]:
    """(last hidden state [B, T, H], router logits per layer or None) of right-padded tokens: the
    lean forward (testbed/models/lean_forward.py) for the testbed's own Qwen3-MoE shape, the
    backbone's own forward for any other model, for a backbone that DDP or FSDP2 wraps (their
    hooks run on module calls; testbed/models/units.py) and for one with LoRA adapters (the lean
    forward would read the base weights alone). Padding positions hold unspecified values.
    `forced` [B, T, L, k]: expert ids to replay (routing replay; testbed/models/routing.py), through
    router hooks on the backbone's own forward (testbed/models/router_hooks.py)."""
    if lean_forward.supports(backbone) and not engine_managed(backbone) and not has_adapters(backbone):
        return lean_forward.backbone_forward(backbone, tokens, attention_mask, routing, forced)
    kwargs = {"output_router_logits": True} if routing else {}
    with router_hooks(backbone, forced=forced) if forced is not None else nullcontext():
        out = backbone(input_ids=tokens, attention_mask=attention_mask, use_cache=False, **kwargs)
    return out.last_hidden_state, (getattr(out, "router_logits", None) if routing else None)
