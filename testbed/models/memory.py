"""The memory plan: bytes each process holds, per model and item, from a model's shapes alone.

A model built on the meta device (from config.json: no weights, no memory) gives the parameter
counts per part (testbed/models/modules.py); the settings give dtypes, sharding and batch sizes.
Per learner rank and model (policy, KL reference, critic):

- weights: parameters x bytes of the dtype, / W under FSDP (plus the two decoder layers FSDP
  gathers at a time: the one computing and the one prefetched);
- gradients: trainable parameters x bytes, / W under FSDP;
- optimiser: AdamW's two moments per trainable parameter, in the parameter's dtype, / W under FSDP;
- LoRA (`policy.lora`, SAO's `critic_trainable: lora`): the frozen base's weights plus the
  adapters' (r x (in + out) per adapted matrix, r x experts x (in + out) per fused expert weight);
  gradients and optimiser state for the adapters alone (and the critic's routers); no KL reference
  copy (the policy with its adapters off is the reference);
- activations: the tokens of one rank's update x what one decoder layer keeps for backward
  (about 34 x hidden bytes per token in 16-bit, Korthikanti et al. 2022, plus the routed experts'
  top_k x 3 x expert width), or only each layer's input with activation checkpointing, plus the
  float32 log-probabilities over the vocabulary for the scored tokens.

A rollout actor holds the policy's weights in the engine's dtype and the KV cache of one round
(2 x layers x kv_heads x head_dim x bytes per token). These are estimates to plan with: the
allocator's caching and fragmentation, CUDA's context (about 0.5 GB) and kernels' workspaces come
on top, so the plan keeps a margin (`HEADROOM`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.models.modules import EXPERTS, ROUTER, module_family, moe_shape

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADROOM = 0.9  # the share of a device a plan may fill
ACT_BYTES_PER_HIDDEN = 34  # per token and layer, 16-bit, no recomputation (Korthikanti et al.)
GB = 1e9


@dataclass(frozen=True)
class ModelShape:
    parameters: int
    moe_parameters: int  # experts and routers: what `critic_trainable: moe` trains
    layers: int
    hidden: int
    vocab: int
    kv_heads: int
    head_dim: int
    top_k: int
    expert_width: int
    largest_layer: int  # parameters of the largest decoder layer
    router_parameters: int = 0
    # (name, shape) of every 2-D and 3-D parameter: what LoRA could adapt
    matrices: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        """The shape of a (meta-device) transformers causal LM."""
        cfg = model.config
        sizes = {name: p.numel() for name, p in model.named_parameters()}
        moe = sum(n for name, n in sizes.items() if module_family(name) in (EXPERTS, ROUTER))
        layers = int(cfg.num_hidden_layers)
        per_layer = [sum(n for name, n in sizes.items() if f"layers.{i}." in name) for i in range(layers)]
        heads = int(cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        _, top_k = moe_shape(cfg) or (1, 1)
        width = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
        return cls(
            sum(sizes.values()),
            moe,
            layers,
            int(cfg.hidden_size),
            int(cfg.vocab_size),
            int(getattr(cfg, "num_key_value_heads", None) or heads),
            head_dim,
            int(top_k),
            int(width),
            max(per_layer, default=0),
            sum(n for name, n in sizes.items() if module_family(name) == ROUTER),
            tuple((n, tuple(p.shape)) for n, p in model.named_parameters() if p.dim() in (2, 3)),
        )


def adapter_parameters(shape: ModelShape, targets: tuple[str, ...] | None, r: int) -> int:
    """LoRA's parameters on every matrix a target names (a dotted suffix of the matrix or of its
    module, as testbed/models/lora.py matches them; None: the experts, the critic's adapters):
    A [r, in] and B [out, r] per matrix, r per expert for a fused expert weight [E, a, b]."""
    total = 0
    for name, dims in shape.matrices:
        module = name.removesuffix(".weight")
        if targets is None:
            hit = module_family(name) == EXPERTS
        else:
            hit = any(m == t or m.endswith("." + t) for t in targets for m in (name, module))
        if hit:
            total += r * (dims[0] + dims[1]) if len(dims) == 2 else r * dims[0] * (dims[1] + dims[2])
    return total


@dataclass
class Settings:
    """What the plan depends on besides the shape (testbed/cli/memory_plan.py reads a scenario)."""

    dtype: str = "float32"  # the weights' dtype on the learners and the engines
    strategy: str = "replicate"
    learner_workers: int = 1
    rollout_workers: int = 1
    param_dtype: str | None = None  # FSDP's compute dtype (MixedPrecisionPolicy)
    offload: bool = False
    activation_checkpointing: bool = False
    micro_batch_tokens: int | None = None  # runtime.micro_batch_tokens: tokens per forward-backward
    episodes_per_update: int = 32
    round_episodes: int = 32
    prompt_tokens: int = 192
    new_tokens: int = 48
    critic: str | None = None  # None (no critic), "moe", "all" or "lora"
    critic_lora_r: int = 8
    lora_targets: tuple[str, ...] | None = None  # policy.lora's target_modules; None: no LoRA
    lora_r: int = 8
    reference: bool = False
    separate_processes: bool = True  # ray: learners and actors are their own processes
    device_share: float = 1.0  # the share of a device each process gets (ray's actor_gpus below 1)
    notes: list[str] = field(default_factory=list)


def sharded(s: Settings) -> bool:
    """FSDP acts with two learner ranks or more (one learner is a plain process)."""
    return s.strategy == "fsdp" and s.learner_workers > 1


def model_items(shape: ModelShape, s: Settings, trained: int, role: str, adapters: int = 0) -> dict[str, int]:
    """Bytes of one model on one learner rank: weights (with LoRA adapters), gradients, optimiser state."""
    width = BYTES[s.dtype]
    w = s.learner_workers if sharded(s) else 1
    items = {f"{role} weights": (shape.parameters + adapters) * width // w}
    if sharded(s):  # two gathered layers at a time, in the compute dtype
        items[f"{role} gathered layers"] = 2 * shape.largest_layer * BYTES[s.param_dtype or s.dtype]
    if trained:
        items[f"{role} gradients"] = trained * width // w
        items[f"{role} optimiser"] = 2 * trained * width // w
    if s.offload and sharded(s):  # on the host: the device keeps only the gathered layers
        for key in [k for k in items if "gathered" not in k]:
            items[key] = 0
    return items


def activation_bytes(shape: ModelShape, s: Settings) -> int:
    """One rank's forward-backward of its share of an update (the larger of policy and critic)."""
    row = s.prompt_tokens + s.new_tokens
    tokens = -(-s.episodes_per_update // s.learner_workers) * row
    if s.micro_batch_tokens is not None:  # one micro-batch at a time, of one row at least
        tokens = min(tokens, max(s.micro_batch_tokens // row, 1) * row)
    width = BYTES[s.param_dtype or s.dtype] if sharded(s) else BYTES[s.dtype]
    per_token = ACT_BYTES_PER_HIDDEN * shape.hidden * width // 2 + shape.top_k * 3 * shape.expert_width * width
    # with checkpointing each layer keeps its input, and one layer at a time its whole set
    checkpointing = s.activation_checkpointing and sharded(s)
    layers = shape.layers * shape.hidden * width + per_token if checkpointing else shape.layers * per_token
    scored = tokens // row * s.new_tokens
    return tokens * layers + scored * shape.vocab * 4 * 2  # log-softmax and its gradient, float32


def learner_items(shape: ModelShape, s: Settings) -> dict[str, int]:
    adapters = adapter_parameters(shape, s.lora_targets, s.lora_r) if s.lora_targets else 0
    items = model_items(shape, s, adapters or shape.parameters, "policy", adapters)
    if s.reference and not s.lora_targets:  # a LoRA policy is its own reference (adapters off)
        items.update(model_items(shape, s, 0, "reference"))
    if s.critic == "lora":
        adapters = adapter_parameters(shape, None, s.critic_lora_r)
        # the routers train in full beside the experts' adapters
        items.update(model_items(shape, s, adapters + shape.router_parameters, "critic", adapters))
    elif s.critic:
        trained = shape.moe_parameters if s.critic == "moe" else shape.parameters
        items.update(model_items(shape, s, trained, "critic"))
    items["activations"] = activation_bytes(shape, s)
    return items


def build_items(shape: ModelShape, s: Settings) -> dict[str, int]:
    """A sharded learner rank while it builds: each model whole on its device, in the weights' dtype,
    until `fully_shard` cuts it (learner_strategy.shard_trainer; no gradients or optimiser state yet)."""
    width = BYTES[s.dtype]
    adapters = adapter_parameters(shape, s.lora_targets, s.lora_r) if s.lora_targets else 0
    items = {"policy whole (building)": (shape.parameters + adapters) * width}
    if s.reference and not s.lora_targets:
        items["reference whole (building)"] = shape.parameters * width
    if s.critic:
        critic_adapters = adapter_parameters(shape, None, s.critic_lora_r) if s.critic == "lora" else 0
        items["critic whole (building)"] = (shape.parameters + critic_adapters) * width
    return items


def actor_items(shape: ModelShape, s: Settings) -> dict[str, int]:
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * BYTES[s.dtype]
    return {
        "policy weights (engine)": shape.parameters * BYTES[s.dtype],
        "KV cache": s.round_episodes * (s.prompt_tokens + s.new_tokens) * kv_per_token,
    }


def plan(shape: ModelShape, s: Settings, device_bytes: int) -> dict[str, Any]:
    """Each process's items and total against the device; `fits` False names the largest item."""
    processes = {"learner rank": learner_items(shape, s), "rollout actor": actor_items(shape, s)}
    if sharded(s):  # the rank's peak may come before sharding: every model whole at once
        processes["learner rank, building"] = build_items(shape, s)
    if not s.separate_processes:  # the synchronous runtime: one process holds both
        merged = {**processes["learner rank"], **processes["rollout actor"]}
        merged.pop("policy weights (engine)")  # the engine samples the trained policy itself
        processes = {"process": merged}
    budget = int(device_bytes * s.device_share * HEADROOM)
    out: dict[str, Any] = {"device_bytes": device_bytes, "budget_bytes": budget}
    out["processes"] = {name: {"items": items, "total": sum(items.values())} for name, items in processes.items()}
    over = [(name, items) for name, items in processes.items() if sum(items.values()) > budget]
    out["fits"] = not over
    if over:
        name, items = max(over, key=lambda kv: sum(kv[1].values()))
        item = max(items, key=lambda k: items[k])
        out["largest"] = {"process": name, "item": item, "bytes": items[item]}
        out["fixes"] = fixes_for(item, s)
    return out


def size(n: int) -> str:
    """Bytes for people: GB from 1 GB up, else MB."""
    return f"{n / GB:.3g} GB" if n >= GB else f"{n / 1e6:.3g} MB"


def fixes_for(item: str, s: Settings) -> list[str]:
    """The settings that shrink `item` (what the refusal suggests)."""
    if item == "activations":
        fixes = ["runtime.micro_batch_tokens", "a smaller episodes_per_update", "a smaller sampling.max_new_tokens"]
        return fixes + ["runtime.learner_strategy: fsdp, 2+ learner_workers, fsdp.activation_checkpointing: true"]
    if item == "KV cache":
        return ["a smaller sampling.max_new_tokens", "a smaller episodes_per_update (fewer sequences per round)"]
    if item == "policy weights (engine)":
        return ["a smaller model, or a 16-bit checkpoint (torch_dtype bfloat16)"]
    if item.endswith("(building)"):  # sharding comes after the build: more ranks do not help
        fixes = ["a smaller model, or a 16-bit checkpoint (torch_dtype bfloat16)"]
        if s.reference and not s.lora_targets:
            fixes.append("policy.lora (the reference is the policy with its adapters off: one whole copy fewer)")
        return fixes + ["no KL reference (kl_coef: 0)" if s.reference else "a GPU with more memory per learner rank"]
    ray = "" if s.separate_processes else "runtime.kind: ray with "
    if not sharded(s):
        fixes = [f"{ray}runtime.learner_strategy: fsdp and 2+ runtime.learner_workers (each holds 1/W)"]
    else:
        fixes = [f"more runtime.learner_workers (now {s.learner_workers})"]
        if not s.offload:
            fixes.append("runtime.fsdp.offload: true (parameters, gradients and optimiser state on the host)")
    if item.startswith("critic") and s.critic == "all":
        fixes.append("SAO's critic_trainable: moe (the critic's attention frozen)")
    if item.startswith("critic") and s.critic in ("moe", "all"):
        fixes.append("SAO's critic_trainable: lora (adapters on the experts: their gradients and AdamW state alone)")
    if item.startswith(("policy", "reference")) and not s.lora_targets:
        fixes.append("policy.lora (adapters: gradients and AdamW state for them alone, no reference copy)")
    return fixes
