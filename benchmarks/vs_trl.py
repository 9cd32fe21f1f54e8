"""The testbed's GRPO arm against TRL's `GRPOTrainer`, side by side in one run.

    pip install -e '.[bench]'
    python benchmarks/vs_trl.py [--steps 6] [--pairs 3] [--threads 1]

Both sides train the same Qwen3-MoE shape (the default scenario's policy, from the same random
init) with the same batch (8 prompts x 4 completions per step), completion length (48 tokens),
temperature (1.0, no top-k/top-p), learning rate and KL coefficient (0.2), on the same prompts,
and both pay for the same reward: the embedded rubric judge, scoring quality x style against
the phase-1 target. The sides alternate (testbed, TRL, testbed, ...) so that a machine whose
speed drifts treats them alike; each prints episodes (completions) per second and its share of
time in generation, and the script prints the ratio per pair and its median.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed.engines.hf_engine import HFEngine
from testbed.envs.style_shift import StyleShiftEnv
from testbed.models.policy import build_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.registry import load
from testbed.scenario.schema import PolicyConfig, SamplingConfig
from testbed.types import JudgeRequest
from testbed.world import prompts

PROMPTS, GROUP, COMPLETION, TEMPERATURE, LR, KL = 8, 4, 48, 1.0, 2e-4, 0.2
CANDIDATES = ("academic", "cute", "chuunibyou")
TARGET = "cute"


def make_env(judge):
    from testbed.envs.schedules import Phase, PiecewiseSchedule

    return StyleShiftEnv(judge, PiecewiseSchedule([Phase(TARGET, 0, 1, CANDIDATES)]), prompts("train"), seed=0)


def run_testbed(steps: int, tok: WordTokenizer, judge) -> dict:
    """The GRPO arm's own pieces, as the loop runs them: reset -> generate -> judge -> update."""
    from trainers.grpo import GRPOTrainer

    torch.manual_seed(0)
    model = build_policy(PolicyConfig(), tok, seed=0)
    engine = HFEngine(model, tok, SamplingConfig(temperature=TEMPERATURE, max_new_tokens=COMPLETION))
    trainer = GRPOTrainer(
        model,
        {"group_size": GROUP, "episodes_per_update": GROUP * PROMPTS, "lr": LR, "kl_coef": KL},
        pad_id=tok.pad_id,
        temperature=TEMPERATURE,
    )
    env = make_env(judge)
    env.reset(seed=0)
    gen = total = 0.0
    for step in range(steps + 1):  # step 0 warms up, uncounted
        start = time.perf_counter()
        starts = env.reset_batch(PROMPTS, repeat=GROUP)
        t0 = time.perf_counter()
        trajs = engine.generate([s.prompt_text for s in starts])
        t1 = time.perf_counter()
        verdicts = env.step_batch(starts, [t.response_text for t in trajs])
        for i, (traj, verdict) in enumerate(zip(trajs, verdicts)):
            traj.verdict, traj.group_id = verdict, i // GROUP
        trainer.update(trajs)
        if step:
            gen += t1 - t0
            total += time.perf_counter() - start
    return {"episodes_per_s": steps * PROMPTS * GROUP / total, "generation_share": gen / total, "seconds": total}


def run_trl(steps: int, tok: WordTokenizer, judge) -> dict:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok.hf,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )
    env = make_env(judge)
    env.reset(seed=0)
    # The same prompts as the testbed side sees, written as the policy reads them: <bos> prompt <sep>
    texts = [f"<bos> {s.prompt_text} <sep>" for s in env.reset_batch(PROMPTS * (steps + 1))]

    def reward(prompts, completions, **_):
        # The same judge call, with the same text the testbed judges.
        requests = [
            JudgeRequest(p, tok.decode(tok.encode(c)), TARGET, CANDIDATES) for p, c in zip(prompts, completions)
        ]
        return [v.reward for v in asyncio.run(judge.judge(requests))]

    # TRL builds its KL reference from the policy's path, so both come from the same saved init.
    init = Path(tempfile.mkdtemp()) / "policy"
    build_policy(PolicyConfig(), tok, seed=0).save_pretrained(init)
    timing = {"generate": 0.0, "steps": []}

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            timing["steps"].append([time.perf_counter(), None, timing["generate"]])

        def on_step_end(self, args, state, control, **kw):
            timing["steps"][-1][1] = time.perf_counter()

    config = GRPOConfig(
        output_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / "vs_trl"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=10_000,
        max_steps=steps + 1,
        learning_rate=LR,
        beta=KL,
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=COMPLETION,
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        gradient_accumulation_steps=1,
        num_iterations=1,
        bf16=False,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=str(init),
            reward_funcs=reward,
            args=config,
            processing_class=hf_tok,
            train_dataset=Dataset.from_dict({"prompt": texts}),
            callbacks=[StepClock()],
        )
        original = trainer.model.generate

        def timed_generate(*args, **kwargs):
            start = time.perf_counter()
            out = original(*args, **kwargs)
            timing["generate"] += time.perf_counter() - start
            return out

        trainer.model.generate = timed_generate
        trainer.train()
    shutil.rmtree(init.parent, ignore_errors=True)
    counted = timing["steps"][1:]  # step 0 warms up, uncounted
    total = sum(end - begin for begin, end, _ in counted)
    gen = timing["generate"] - timing["steps"][1][2]
    return {"episodes_per_s": steps * PROMPTS * GROUP / total, "generation_share": gen / total, "seconds": total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="timed updates per side per pair (after one warm-up)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, the same for both sides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok = WordTokenizer.build()
    judge = load("judge", "rubric")()
    ratios = []
    for pair in range(args.pairs):
        ours = run_testbed(args.steps, tok, judge)
        theirs = run_trl(args.steps, tok, judge)
        ratios.append(ours["episodes_per_s"] / theirs["episodes_per_s"])
        for name, r in (("testbed GRPO", ours), ("TRL GRPOTrainer", theirs)):
            print(
                f"pair {pair + 1} {name:16s} {r['episodes_per_s']:7.1f} episodes/s  "
                f"generation {r['generation_share']:5.1%} of {r['seconds']:.1f} s"
            )
        print(f"pair {pair + 1} ratio testbed / TRL: {ratios[-1]:.2f}x")
    print(
        f"median ratio over {args.pairs} pairs: {statistics.median(ratios):.2f}x "
        f"({args.steps} updates of {PROMPTS} x {GROUP} completions per side per pair, {args.threads} thread(s))"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
