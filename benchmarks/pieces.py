"""CPU milliseconds of the hot pieces, each the minimum over repeats (steady on a loaded machine).

    python benchmarks/pieces.py [SCENARIO] [--repeats 10]

On the scenario's SFT policy (from the cache, trained first if absent) and one batch of 32 of its
own samples: generating 32 and 64 prompts, a policy forward + backward, a no-grad forward (the KL
reference), one running-mean update and one SAO update (batch 32, learning rates ~0 so that every
repeat sees the same weights). One thread. Compare two trees by running this in each, alternately.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import testbed  # noqa: F401  first: it pins the CPU kernels before torch loads (numerics)
from testbed import registry
from testbed.models.policy import token_logprobs
from testbed.runtimes.runner import make_engine
from testbed.runtimes.starting import starting_policies
from testbed.scenario.schema import load_scenario
from testbed.types import Verdict
from testbed.world import prompts, render_prompt
from trainers.batching import collate


def best_ms(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return round(1000 * min(times), 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", nargs="?", default="scenarios/style_shift.yaml")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    scenario = load_scenario(args.scenario, ["seeds=[0]", "runtime.parallel_arms=false"])  # this process only
    start = starting_policies(scenario, log=lambda message: None)[0]
    model, tok = start.policy, start.tokenizer
    rng = random.Random(0)
    texts = [render_prompt(rng.choice(prompts("train")), ["academic", "cute", "chuunibyou"]) for _ in range(32)]
    engine = make_engine(scenario, model, tok)
    torch.manual_seed(0)
    batch = engine.generate(texts)
    for i, traj in enumerate(batch):  # half rewarded, so advantages are not all zero
        traj.verdict = Verdict(quality=1, style_match=i % 2, style="cute")
    data = collate(batch, tok.pad_id)

    def forward_backward() -> None:
        token_logprobs(model, data.tokens, data.attention_mask, where=data.action_mask)[0].sum().backward()

    def no_grad_forward() -> None:
        with torch.no_grad():
            token_logprobs(model, data.tokens, data.attention_mask, where=data.action_mask)

    trainers = {
        name: registry.build(registry.load("trainer", name), cfg, copy.deepcopy(model), pad_id=tok.pad_id)
        for name, cfg in (
            ("running_mean", {"episodes_per_update": 32, "lr": 1e-12, "kl_coef": 0.2}),
            (
                "sao",
                {
                    "episodes_per_update": 32,
                    "policy_lr": 1e-12,
                    "critic_lr": 1e-12,
                    "kl_coef": 0.2,
                    "value_warmup_updates": 0,
                },
            ),
        )
    }
    pieces = {
        "generate_32": lambda: engine.generate(texts),
        "generate_64": lambda: engine.generate(texts + texts),
        "policy_forward_backward": forward_backward,
        "no_grad_forward": no_grad_forward,
        "running_mean_update": lambda: trainers["running_mean"].update(batch),
        "sao_update": lambda: trainers["sao"].update(batch),
    }
    print(json.dumps({name: best_ms(fn, args.repeats) for name, fn in pieces.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
