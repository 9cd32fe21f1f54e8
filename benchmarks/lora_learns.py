"""Does a LoRA policy learn the phase-1 style? A tiny run of the shipped golden starting policy
(tests/data/golden/policy) with one target style throughout, once with full fine-tuning and once
with `policy.lora` (PEFT adapters on attention and the fused experts), side by side. Not a unit test.

Per run: the held-out share of responses in the target style at the first and last evaluation,
the mean reward of the first and last `--window` training episodes, the trainable parameters and
the wall time. Same seed, scenario and trainer settings for both; only `policy.lora` differs.

    python benchmarks/lora_learns.py [--episodes 384] [--trainer running_mean] [--lr 2e-3] [--r 8] [--alpha 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed.cli.run_command import main as run_main  # noqa: E402
from testbed.store import read_table  # noqa: E402

STYLE = "cute"
SCENARIO = f"""
name: lora_learns
schedule:
  type: piecewise
  args:
    phases:
      - {{style: {STYLE}, start: 0.0, end: 1.0, candidates: [academic, cute, chuunibyou]}}
policy: {{checkpoint: {ROOT / "tests/data/golden/policy"}}}
sampling: {{max_new_tokens: 24}}
arms: [{{name: arm, type: TRAINER, args: ARGS}}]
seeds: [0]
budget: {{episodes: EPISODES}}
eval: {{every: EVERY, prompts: 32, reference_samples: 0}}
"""


def run(args: argparse.Namespace, lora: str | None, out: Path) -> dict[str, float]:
    trainer_args = f"{{episodes_per_update: 16, lr: {args.lr}, kl_coef: {args.kl_coef}}}"
    text = (
        SCENARIO.replace("TRAINER", args.trainer)
        .replace("ARGS", trainer_args)
        .replace("EPISODES", str(args.episodes))
        .replace("EVERY", str(args.episodes // 4))
    )
    path = out / "scenario.yaml"
    path.write_text(text)
    name = "lora" if lora else "full"
    extra = ["--set", f"policy.lora={lora}"] if lora else []
    started = time.perf_counter()
    code = run_main([str(path), "--out", str(out), "--run-name", name, "--no-report", *extra])
    if code != 0:
        raise SystemExit(f"the {name} run failed (exit {code})")
    wall = time.perf_counter() - started
    evals = read_table(out / name, "evals")
    share = evals[evals["style"] == STYLE].sort_values("t")["share"].tolist()
    episodes = read_table(out / name, "episodes").sort_values("t")["reward"].tolist()
    w = args.window
    return {
        "share_first": share[0],
        "share_last": share[-1],
        "reward_first": sum(episodes[:w]) / w,
        "reward_last": sum(episodes[-w:]) / w,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=384)
    parser.add_argument("--trainer", default="running_mean", choices=["running_mean", "grpo"])
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--alpha", type=int, default=16)
    parser.add_argument("--window", type=int, default=64, help="training episodes averaged at each end")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lora-learns-") as tmp:
        for lora in (None, f"{{r: {args.r}, alpha: {args.alpha}}}"):
            rows.append(
                ("full" if lora is None else f"lora r={args.r} alpha={args.alpha:g}", run(args, lora, Path(tmp)))
            )
    print(f"\n{args.trainer}, lr {args.lr:g}, kl_coef {args.kl_coef:g}, {args.episodes} episodes, target {STYLE}")
    print("| policy | held-out share first -> last eval | reward first -> last episodes | wall s |")
    print("|---|---|---|---|")
    for name, r in rows:
        print(
            f"| {name} | {r['share_first']:.3f} -> {r['share_last']:.3f} | "
            f"{r['reward_first']:.3f} -> {r['reward_last']:.3f} | {r['wall_s']:.0f} |"
        )


if __name__ == "__main__":
    main()
