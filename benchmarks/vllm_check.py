"""vLLM against the trainer and the HF engine on one policy: log-prob agreement of sampled tokens,
a weight sync (new weights' log-probs, not the old ones'), and throughput side by side. Run it in
the vLLM environment (`make vllm`; on a GPU `make vllm VLLM_PACKAGE=vllm==0.33.0`):

    .venv-vllm/bin/python benchmarks/vllm_check.py [--checkpoint DIR] [--dtype float32] [--prompts 64] [--rounds 3]

Without --checkpoint it builds the vLLM scenario's policy shape untrained (head_dim 32); give an
export (`python -m testbed.cli.export DIR --scenario scenarios/vllm_shift.yaml`) for real text.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed.engines.hf_engine import HFEngine
from testbed.engines.mismatch import logprob_gaps
from testbed.engines.vllm_engine import VLLMEngine
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import PolicyConfig, SamplingConfig, load_scenario
from testbed.world import prompts, render_prompt


def policy(checkpoint: str | None) -> tuple[torch.nn.Module, object]:
    """The trainer's copy stays on the CPU in float32 (so does `HFEngine`); vLLM picks its own device."""
    if checkpoint:
        from testbed.models.hub import load_checkpoint

        model, tok, _ = load_checkpoint(checkpoint)
    else:
        tok = WordTokenizer.build()
        shape = load_scenario("scenarios/vllm_shift.yaml").policy.model_dump(exclude={"checkpoint", "sft"})
        model = build_policy(PolicyConfig(**shape), tok, seed=0)
    return model.eval(), tok


def gaps(model: torch.nn.Module, trajs: list) -> dict[str, float]:
    """|vLLM - trainer| log-prob over every sampled token, trainer in float32."""
    d = logprob_gaps(model, trajs)
    return {"mean": float(d.mean()), "max": float(d.max()), "tokens": int(d.numel())}


def throughput(engine: object, texts: list[str], rounds: int) -> dict[str, float]:
    engine.generate(texts)  # warm-up
    started, tokens = time.perf_counter(), 0
    for _ in range(rounds):
        tokens += sum(len(t.response_tokens) for t in engine.generate(texts))
    seconds = time.perf_counter() - started
    return {"episodes_per_s": round(rounds * len(texts) / seconds, 1), "tokens_per_s": round(tokens / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", help="a Hub-format export of the policy (default: the vLLM scenario's shape, untrained)"
    )
    parser.add_argument("--dtype", default="float32", help="vLLM's dtype (bfloat16 shows a real mismatch)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-threads-bind", default="nobind", help="VLLM_CPU_OMP_THREADS_BIND on CPU")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # where vLLM runs
    model, tok = policy(args.checkpoint)
    sampling = SamplingConfig()
    started = time.perf_counter()
    engine = VLLMEngine(
        model,
        tok,
        sampling,
        dtype=args.dtype,
        cpu_threads_bind=args.cpu_threads_bind,
        probe_tolerance=0.1 if args.dtype != "float32" else 1e-3,
    )
    report = {
        "device": device,
        "dtype": args.dtype,
        "start_s": round(time.perf_counter() - started, 1),
        "start_probe": dict(engine.last_sync),
    }
    specs = prompts("train")
    texts = [render_prompt(specs[i % len(specs)], ["cute", "academic", "classical"]) for i in range(args.prompts)]
    report["agreement"] = gaps(model, engine.generate(texts))
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    engine.load_weights(None, 1)
    report["sync"] = dict(engine.last_sync)
    trajs = engine.generate(texts)
    report["after_sync_vs_new"] = gaps(model, trajs)
    new = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(old)
    report["after_sync_vs_old"] = gaps(model, trajs)
    model.load_state_dict(new)
    report["throughput_vllm"] = throughput(engine, texts, args.rounds)
    report["throughput_hf"] = throughput(HFEngine(model, tok, sampling), texts, args.rounds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
