"""Learner strategies side by side on the built policy: `replicate` (DDP) and `fsdp` (FSDP2) on 1
and 2 gloo ranks (real processes), in one run. Not a unit test.

Per configuration:
- memory per rank, measured from the live tensors after the updates: parameters, gradients and
  AdamW state (each rank's local shards), and the activations kept for backward in one policy
  forward (every tensor autograd saves, counted once per storage, through saved_tensors_hooks),
  beside the plan's prediction (testbed/models/memory.py); and the process's resident memory
  (RSS, from /proc: what the operating system measures) grown since before the trainer was built:
  now, after the updates, and its high-water mark (which includes building the whole models on
  every rank before they are sharded). `--hidden/--experts/--expert-size` widen the policy so
  that its tensors stand out of torch's own ~500 MB;
- learner throughput: episodes per second of `trainer.update` over a batch split across the ranks
  (the learner alone; the rollout side is benchmarks/distributed.py's).

    python benchmarks/sharded_learners.py [--trainer sao] [--updates 6] [--batch 32] [--hidden 64 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402


def local_bytes(t: torch.Tensor) -> int:
    t = t.to_local() if isinstance(t, DTensor) else t
    return t.numel() * t.element_size()


def measured(trainer) -> dict[str, int]:
    from testbed.runtimes.learner_strategy import trainer_modules, trainer_optimizers

    out = {"weights": 0, "gradients": 0, "optimiser": 0}
    for module in trainer_modules(trainer):
        for p in module.parameters():
            out["weights"] += local_bytes(p)
    for opt in trainer_optimizers(trainer):
        for group in opt.param_groups:
            for p in group["params"]:
                out["gradients"] += local_bytes(p.grad) if p.grad is not None else 0
                out["optimiser"] += sum(local_bytes(v) for v in opt.state.get(p, {}).values() if v.dim() > 0)
    return out


def saved_activation_bytes(trainer, batch) -> int:
    """Bytes autograd keeps for backward in one policy forward of `batch` (parameters excluded)."""
    from testbed.models.policy import token_logprobs_and_routing
    from trainers.batching import collate

    def storage(t: torch.Tensor):
        return (t.to_local() if isinstance(t, DTensor) else t).untyped_storage()

    params = {storage(p).data_ptr() for p in trainer.policy.parameters()}
    seen: dict[int, object] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = storage(t)
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s
        return t

    data = collate(batch, trainer.pad_id)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _, _ = token_logprobs_and_routing(
            trainer.policy, data.tokens, data.attention_mask, where=data.action_mask
        )
    # after the forward: FSDP2 has freed the gathered weights it saved (their storage is empty now)
    kept = sum(s.nbytes() for s in seen.values())  # type: ignore[attr-defined]
    logp.sum().backward()
    trainer.policy.zero_grad(set_to_none=True)
    return kept


def rss_mb() -> tuple[float, float]:
    """(resident memory now, its high-water mark) of this process in MB (10^6 bytes), from /proc
    (Linux). First glibc's free heap pages go back to the system (`malloc_trim`), so that "now"
    counts what is in use, not what the allocator kept of freed tensors (the whole models built
    before sharding, the last backward's activations)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024 / 1e6, int(fields["VmHWM"].split()[0]) * 1024 / 1e6


def run_rank(rank: int, world: int, port: int, strategy: str, kind: str, batches, out: str, shape: dict) -> None:
    from testbed.runtimes.learner_strategy import apply
    from testbed.runtimes.ray.learner import shard_weights, split_batch
    from testbed.scenario.sharding import FSDPConfig
    from testbed.shard import shard_weight

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    make_trainer(kind, {})  # torch's and transformers' lazy imports and first allocations, before the baseline
    rss_before, hwm_before = rss_mb()
    trainer = make_trainer(kind, shape)
    apply(trainer, strategy, FSDPConfig(param_dtype="float32"))
    started = None
    for i, batch in enumerate(batches):
        if i == 1:  # the first update builds the optimiser state and warms the engines up
            dist.barrier()
            started = time.perf_counter()
        shards = split_batch(batch, world, keep_groups=trainer.group_size > 1)
        weights = shard_weights(shards)
        if world == 1:
            trainer.update(shards[0])
        else:
            with shard_weight(weights[rank]):
                trainer.update(shards[rank])
    dist.barrier()
    elapsed = time.perf_counter() - (started or time.perf_counter())
    rss_after, hwm_after = rss_mb()
    result = {
        "rss_growth_mb": rss_after - rss_before,
        "hwm_growth_mb": hwm_after - hwm_before,
        "episodes_per_s": sum(len(b) for b in batches[1:]) / elapsed,
        **measured(trainer),
        "activations": saved_activation_bytes(trainer, split_batch(batches[0], world, False)[rank]),
        "rss_max_mb": hwm_after,
    }
    torch.save(result, f"{out}.{rank}")
    dist.destroy_process_group()


def make_trainer(kind: str, shape: dict):
    from testbed.models.policy import build_policy
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import PolicyConfig
    from trainers.grpo import GRPOTrainer
    from trainers.sao import SAOTrainer

    tok = WordTokenizer.build()
    policy = build_policy(PolicyConfig(**shape), tok, seed=0)
    if kind == "sao":
        return SAOTrainer(policy, {"value_warmup_updates": 0, "value_pretrain_samples": 0}, pad_id=tok.pad_id)
    return GRPOTrainer(policy, {"group_size": 4}, pad_id=tok.pad_id)


def make_batches(kind: str, n: int, size: int):
    from testbed.engines.hf_engine import HFEngine
    from testbed.models.policy import build_policy
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import PolicyConfig, SamplingConfig
    from testbed.types import Verdict
    from testbed.world import prompts, render_prompt

    tok = WordTokenizer.build()
    engine = HFEngine(build_policy(PolicyConfig(), tok, seed=0), tok, SamplingConfig(max_new_tokens=48))
    group = 4 if kind == "grpo" else 1
    specs = prompts("train")
    out = []
    for b in range(n):
        texts = [render_prompt(specs[(b * size + i) % len(specs)], ["cute", "academic"]) for i in range(size // group)]
        trajs = engine.generate(texts, n=group)
        for i, t in enumerate(trajs):
            t.verdict = Verdict(quality=1, style_match=i % 2, style="cute")
            t.group_id, t.prompt_id = b * size + i // group, f"p{i // group}"
        out.append(trajs)
    return out


def planned(kind: str, strategy: str, world: int, batch: list, shape: dict) -> dict[str, int]:
    from testbed.models.memory import ModelShape, Settings, activation_bytes, learner_items
    from testbed.models.policy import build_policy
    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import PolicyConfig

    tok = WordTokenizer.build()
    with torch.device("meta"):
        model_shape = ModelShape.of(build_policy(PolicyConfig(**shape), tok))
    tokens = max(len(t.segments[0].tokens) for t in batch)
    prompt = max(len(t.prompt_tokens) for t in batch) if hasattr(batch[0], "prompt_tokens") else 0
    s = Settings(
        strategy=strategy,
        learner_workers=world,
        episodes_per_update=len(batch),
        prompt_tokens=prompt,
        new_tokens=tokens,
        critic="moe" if kind == "sao" else None,
    )
    items = learner_items(model_shape, s)
    return {
        "weights": sum(v for k, v in items.items() if "weights" in k),
        "gradients": sum(v for k, v in items.items() if "gradients" in k),
        "optimiser": sum(v for k, v in items.items() if "optimiser" in k),
        "activations": activation_bytes(model_shape, s),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=["sao", "grpo"], default="sao")
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64, help="the policy's hidden size (the built policy: 64)")
    parser.add_argument("--experts", type=int, default=8, help="experts per layer (8)")
    parser.add_argument("--expert-size", type=int, default=64, help="each expert's width (64)")
    args = parser.parse_args()
    shape = {"hidden_size": args.hidden, "num_experts": args.experts, "expert_size": args.expert_size}
    batches = make_batches(args.trainer, args.updates, args.batch)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in ("replicate", "fsdp"):
            for world in (1, 2):
                out = str(Path(tmp) / f"{strategy}{world}")
                run = (world, free_port(), strategy, args.trainer, batches, out, shape)
                mp.spawn(run_rank, args=run, nprocs=world)
                got = torch.load(f"{out}.0", weights_only=False)
                rows.append((strategy, world, got, planned(args.trainer, strategy, world, batches[0], shape)))
    print(
        f"{args.trainer}, built policy shape {shape}, batch {args.batch}, {args.updates - 1} timed updates; "
        "memory of rank 0 in MB; RSS grown since before the trainer was built: after the updates / high-water"
    )
    print(
        "| strategy | ranks | episodes/s | weights | gradients | AdamW state | activations | plan total | RSS now | RSS max |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for strategy, world, got, plan in rows:
        cells = [f"{got[k] / 1e6:.2f} (plan {plan[k] / 1e6:.2f})" for k in ("weights", "gradients", "optimiser")]
        act = f"{got['activations'] / 1e6:.2f} (plan {plan['activations'] / 1e6:.2f})"
        total = sum(plan.values()) / 1e6
        print(
            f"| {strategy} | {world} | {got['episodes_per_s']:.1f} | {' | '.join(cells)} | {act} | {total:.0f} | "
            f"+{got['rss_growth_mb']:.0f} | +{got['hwm_growth_mb']:.0f} (of {got['rss_max_mb']:.0f}) |"
        )


if __name__ == "__main__":
    main()
