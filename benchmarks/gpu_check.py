"""The GPU recipe on a GPU, in a tiny form: one prepared check for a machine with CUDA (it exits
with a message, code 2, on one without).

    python benchmarks/gpu_check.py [--work DIR] [--episodes 64] [--no-ray] [--export DIR] [--stand-in DIR]

(`--device cpu` runs the same steps on the CPU: a check of the script itself where no GPU is.)

Two Hub-format checkpoints stand in for a real MoE: the project's policy exported
(testbed/models/export.py: Qwen3-MoE, so the lean decoder and lean forward run on CUDA) and the
tiny Qwen2-MoE (testbed/models/tiny_hub.py: transformers' own forward with a DynamicCache). Both
are built on the CPU under --work, or given. For each:

  1. the log-prob gap engine vs trainer on CUDA (the same sampled tokens scored by the engine's
     decoding and by the trainers' forward), and the gap CUDA vs CPU for the same tokens;
  2. scenarios/gpu_moe.yaml with `runtime.device=cuda`, the rubric judge (no internet there),
     `--episodes` per arm, on the sync runtime, on the Ray runtime (runtime.actor_gpus 0.25:
     two rollout actors and a learner share the one GPU) and, where there are three GPUs (NCCL
     wants one per rank), on Ray with two FSDP2 learner ranks (`fsdp`, bfloat16 compute; on the
     CPU too, over gloo), and on the sync runtime with LoRA (`lora`: `policy.lora` r 8 on
     attention and the fused experts, SAO's `critic_trainable: lora`; the engine samples through
     the adapters, the KL reference is the base with them off): episodes/s per arm, the run's own
     `mismatch_abs_mean` (engine.mismatch on), and the driver's peak GPU memory (the Ray actors'
     memory is their own processes': `nvidia-smi` while it runs, if wanted).

Prints one JSON object at the end, after the runs' own output, and writes it to WORK/gpu_check.json
(a line per step goes to stderr).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "scenarios" / "gpu_moe.yaml"
SFT_SCENARIO = ROOT / "tests" / "data" / "golden.yaml"  # a small SFT policy that trains in seconds on the CPU


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def require_cuda(device: str) -> str | None:
    """Why this machine cannot run the check, or None."""
    if device == "cuda" and not torch.cuda.is_available():
        return (
            "gpu_check: torch sees no CUDA device on this machine (torch.cuda.is_available() is False, "
            f"torch {torch.__version__}); run it where a GPU is, with a CUDA build of torch"
        )
    return None


def checkpoints(args: argparse.Namespace) -> dict[str, Path]:
    """{name: Hub-format directory}: given, or built under --work (on the CPU)."""
    from testbed.models.tiny_hub import tiny_hub_checkpoint

    work = Path(args.work)
    export = Path(args.export) if args.export else work / "project-policy"
    if not args.export and not (export / "config.json").exists():
        from testbed.models.export import export_policy
        from testbed.runtimes.starting import scenario_policy
        from testbed.scenario.schema import load_scenario

        log(f"exporting the project's SFT policy ({SFT_SCENARIO.name}'s shape) to {export}")
        model, tok, report = scenario_policy(load_scenario(SFT_SCENARIO), 0, log)
        export_policy(model, tok, export, {"scenario": str(SFT_SCENARIO), "seed": 0, "sft": report})
    stand_in = Path(args.stand_in) if args.stand_in else tiny_hub_checkpoint(work)
    return {"qwen3_moe_export": export, "tiny_qwen2_moe": stand_in}


def logprob_gaps(directory: Path, device: str, prompts: int = 32) -> dict[str, Any]:
    """Sampled on `device`, scored by the trainers' forward there and on the CPU."""
    from testbed.engines.hf_engine import HFEngine
    from testbed.models.hub import load_checkpoint
    from testbed.models.policy import token_logprobs
    from testbed.scenario.schema import SamplingConfig
    from testbed.world import prompts as world_prompts
    from testbed.world import render_prompt
    from trainers.batching import collate

    model, tok, _ = load_checkpoint(directory)
    cpu_model = model.eval()
    placed = copy.deepcopy(cpu_model).to(device)
    engine = HFEngine(placed, tok, SamplingConfig(max_new_tokens=32))
    torch.manual_seed(0)
    texts = [render_prompt(p, ["academic", "cute", "chuunibyou"]) for p in world_prompts("train")[:prompts]]
    trajs = engine.generate(texts)
    out: dict[str, Any] = {"lean_decoder": engine.lean is not None, "tokens": 0}
    with torch.no_grad():
        for where, net in ((device, placed), ("cpu", cpu_model)):
            data = collate(trajs, tok.pad_id, device=where)
            logp, _ = token_logprobs(net, data.tokens, data.attention_mask, 1.0, where=data.action_mask)
            gap = (logp.double() - data.behaviour_logprobs.double())[data.action_mask].abs()
            out[f"engine_{device}_vs_trainer_on_{where}"] = {"mean": float(gap.mean()), "max": float(gap.max())}
            out["tokens"] = int(data.action_mask.sum())
    return out


def tiny_recipe(checkpoint: Path, episodes: int, kind: str, device: str) -> list[str]:
    """--set overrides that make the GPU recipe a few-minute check on one GPU."""
    sets = {
        "policy.checkpoint": str(checkpoint),
        "judge": "{type: rubric}",
        "seeds": "[0]",
        "budget.episodes": episodes,
        "eval.every": max(8, episodes // 2),
        "eval.prompts": 8,
        "sampling.max_new_tokens": 32,
        "engine.mismatch": "true",
        "runtime.kind": {"fsdp": "ray", "lora": "sync"}.get(kind, kind),
        "runtime.device": device,
        # NCCL wants one GPU per learner rank: the fsdp run takes three GPUs, the others share one
        "runtime.actor_gpus": (1 if kind == "fsdp" else 0.25) if device == "cuda" else 0,
        "runtime.torch_threads": 2,
        "arms.0.args.episodes_per_update": 8,
        "arms.0.args.value_pretrain_samples": 16,
        "arms.0.args.value_pretrain_batch": 8,
        "arms.0.args.value_warmup_updates": 2,
        "arms.1.args.episodes_per_update": 8,
        "arms.1.args.window": 16,
    }
    if kind == "fsdp":  # two FSDP2 learner ranks, bfloat16 compute, float32 reductions
        sets.update(
            {"runtime.learner_workers": 2, "runtime.learner_strategy": "fsdp", "runtime.fsdp.param_dtype": "bfloat16"}
        )
    if kind == "lora":  # adapters on the policy (attention and experts) and on the critic's experts
        sets.update(
            {"policy.lora": "{r: 8, alpha: 16}", "arms.0.args.critic_trainable": "lora", "arms.0.args.kl_coef": 0.05}
        )
    return [part for key, value in sets.items() for part in ("--set", f"{key}={value}")]


def run_recipe(checkpoint: Path, episodes: int, kind: str, device: str, out: Path, name: str) -> dict[str, Any]:
    """One tiny run of the recipe; its speed, its own mismatch columns and the driver's peak memory."""
    from testbed.cli.run_command import main
    from testbed.store import read_table

    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    code = main(
        [
            str(RECIPE),
            "--out",
            str(out),
            "--run-name",
            name,
            "--no-report",
            *tiny_recipe(checkpoint, episodes, kind, device),
        ]
    )
    result: dict[str, Any] = {
        "exit_code": code,
        "wall_s": round(time.perf_counter() - started, 1),
        "driver_peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
    }
    if code != 0:
        return result
    manifest = json.loads((out / name / "manifest.json").read_text())
    result["episodes_per_s"] = {arm: seeds["0"]["episodes_per_s"] for arm, seeds in manifest["arms"].items()}
    updates = read_table(out / name, "updates")
    if "mismatch_abs_mean" in updates:
        per_arm = updates.groupby("arm")[["mismatch_abs_mean", "mismatch_abs_max"]].mean()
        result["mismatch"] = {arm: {k: float(v) for k, v in row.items()} for arm, row in per_arm.iterrows()}
    result["reward_mean"] = {
        arm: round(float(v), 3) for arm, v in read_table(out / name, "episodes").groupby("arm")["reward"].mean().items()
    }
    return result


def run_kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """sync, lora (sync with LoRA adapters), ray, and fsdp (Ray with two FSDP2 learner ranks) where
    there are three GPUs or the CPU."""
    if args.no_ray:
        return ("sync", "lora")
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    return ("sync", "lora", "ray", "fsdp") if args.device == "cpu" or gpus >= 3 else ("sync", "lora", "ray")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work", default="/tmp/testbed-gpu-check", help="checkpoints and run directories (default: %(default)s)"
    )
    parser.add_argument(
        "--episodes", type=int, default=64, help="episodes per arm of each tiny run (default: %(default)s)"
    )
    parser.add_argument("--no-ray", action="store_true", help="the sync runtime only")
    parser.add_argument("--export", help="an exported project policy to use instead of exporting one")
    parser.add_argument("--stand-in", help="a tiny Qwen2-MoE directory to use instead of building one")
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="cpu: check the script itself where no GPU is"
    )
    args = parser.parse_args(argv)
    problem = require_cuda(args.device)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    import os

    os.environ.setdefault("TESTBED_CACHE", str(Path(args.work) / "cache"))
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "checkpoints": {},
    }
    for name, directory in checkpoints(args).items():
        log(f"{name}: log-prob gaps on {args.device} ({directory})")
        entry: dict[str, Any] = {"directory": str(directory), "gaps": logprob_gaps(directory, args.device)}
        for kind in run_kinds(args):
            log(
                f"{name}: scenarios/gpu_moe.yaml, {args.episodes} episodes per arm, runtime {kind}, device {args.device}"
            )
            entry[kind] = run_recipe(
                directory,
                args.episodes,
                kind,
                args.device,
                Path(args.work) / "runs",
                f"{name}-{kind}-{int(time.time())}",
            )
        report["checkpoints"][name] = entry
    (Path(args.work) / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(f"gpu_check result (also in {Path(args.work) / 'gpu_check.json'}):")
    print(json.dumps(report, indent=1))
    failed = [
        f"{n}/{k}"
        for n, e in report["checkpoints"].items()
        for k in ("sync", "lora", "ray", "fsdp")
        if k in e and e[k]["exit_code"] != 0
    ]
    if failed:
        print(f"gpu_check: runs failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
