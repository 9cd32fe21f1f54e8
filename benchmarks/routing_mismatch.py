"""Routing mismatch against the field's figure: how often the HF engine's `router_noise` /
`router_rounding` make a router choose other experts than the trainer's, on a scenario's SFT policy.

    python benchmarks/routing_mismatch.py [SCENARIO] [--seed 0] [--prompts 256] [--noise 0.05,0.1,...]
        [--logit-noise 0.0] [--set k=v ...]

For each setting, the engine samples one response to each of `--prompts` training prompts and the
mismatch probe (testbed/engines/mismatch.py) scores them with the trainer's forward on the same
weights. Printed per setting: the share of (token, layer) routers whose top-k set differs (Megatron-LM
#4168 reports about 10% of routers disagreeing per forward pass), the share of tokens whose set differs
in at least one layer (94% there, over 48 layers), each layer's share, and the log-prob mismatch it
brings (k3 KL, DIS's out-of-band share), and where it lands: the mean |log r| of the tokens whose
routing flipped against the others, and the share of DIS's out-of-band tokens whose routing flipped.
Routing at position t - 1 decides token t's log-prob, so these are over the tokens whose log-probs
a trainer reads.
"""

from __future__ import annotations

import argparse
import time

import torch

from testbed.cpu_numerics import configure_torch
from testbed.engines.hf_engine import HFEngine
from testbed.engines.mismatch import MismatchProbe, padded_batch
from testbed.models.policy import token_logprobs_and_routing
from testbed.models.routing import expert_table, shifted, top_k_ids
from testbed.runtimes.starting import scenario_policy
from testbed.scenario.schema import load_scenario
from testbed.world import prompts, render_prompt

MEGATRON_ROUTER_DIFF = 0.10  # Megatron-LM #4168: ~10% of routers disagree per forward pass


def settings(noises: list[float], rounding: bool) -> list[dict]:
    out = [{}]
    out += [{"router_rounding": "bfloat16"}] if rounding else []
    out += [{"router_noise": s} for s in noises]
    return out


def measure(policy, tokenizer, sampling, args: dict, texts: list[str], seed: int) -> dict[str, float]:
    torch.manual_seed(seed)  # the same sampling draws for every setting (the run's generator, not episode streams)
    engine = HFEngine(policy, tokenizer, sampling.model_copy(update={"streams": "batch"}), noise_seed=seed, **args)
    trajs = engine.generate(texts)
    probe = MismatchProbe(policy, tokenizer.pad_id, sampling.temperature)
    return {**probe(trajs, version=0), **where_it_lands(policy, tokenizer.pad_id, sampling.temperature, trajs)}


@torch.no_grad()
def where_it_lands(policy, pad_id: int, temperature: float, trajs) -> dict[str, float]:
    """Per token: did its deciding routing flip (any layer), and its |log r| to the engine. Returns
    the mean |log r| of flipped and unflipped tokens and the share of DIS's out-of-band tokens that
    flipped: whether the mismatch lands on the tokens whose routing moved."""
    tokens, attention, action, behaviour = padded_batch(trajs, pad_id)
    logp, _, router = token_logprobs_and_routing(policy, tokens, attention, temperature, where=action)
    engine_ids = expert_table([t.experts for t in trajs], tokens.shape[1])
    own = top_k_ids(router, engine_ids.shape[-1], *tokens.shape)
    flipped = (shifted(own).sort(-1).values != shifted(engine_ids).sort(-1).values).flatten(2).any(-1)[action]
    log_r = (logp.double() - behaviour.double())[action].abs()
    ratio = log_r.exp()  # |log r| -> r >= 1: out of DIS's band (0.7, 6) below or above
    out = (torch.exp(-log_r) <= 0.7) | (ratio >= 6.0)
    return {
        "abs_log_r_flipped": float(log_r[flipped].mean()) if flipped.any() else float("nan"),
        "abs_log_r_kept": float(log_r[~flipped].mean()) if (~flipped).any() else float("nan"),
        "out_of_band_flipped": float(flipped[out].double().mean()) if out.any() else float("nan"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/cluster_corrections.yaml")
    parser.add_argument("--seed", type=int, default=0, help="whose SFT policy (policy.sft.per_seed)")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--noise", default="0.05,0.1,0.15,0.2,0.25,0.3,0.4,0.6", help="router_noise values")
    parser.add_argument("--no-rounding", action="store_true", help="skip router_rounding: bfloat16")
    parser.add_argument("--logit-noise", type=float, default=0.0, help="logit_noise beside each setting")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    configure_torch(1)
    scenario = load_scenario(args.scenario, args.set)
    policy, tokenizer, _ = scenario_policy(scenario, args.seed, log=lambda _: None)
    policy.eval()
    specs = prompts("train")
    candidates = list(scenario.world.archetypes)[:3]
    texts = [render_prompt(specs[i % len(specs)], candidates) for i in range(args.prompts)]
    noises = [float(x) for x in args.noise.split(",") if x]
    print(
        f"{args.scenario}, seed {args.seed}'s SFT policy ({policy.config.num_hidden_layers} MoE layers, "
        f"{policy.config.num_experts} experts, top-{policy.config.num_experts_per_tok}), {len(texts)} prompts, "
        f"logit_noise {args.logit_noise}; Megatron-LM's figure: {MEGATRON_ROUTER_DIFF:.0%} of routers per forward"
    )
    header = (
        "| setting | routers differing | tokens differing in >= 1 layer | per layer | k3 KL | DIS out of band "
        "| mean abs log r, flipped / not | out-of-band tokens flipped | s |"
    )
    print(header)
    print("|---|---|---|---|---|---|---|---|---|")
    for setting in settings(noises, not args.no_rounding):
        started = time.perf_counter()
        extra = {"logit_noise": args.logit_noise} if args.logit_noise else {}
        m = measure(policy, tokenizer, scenario.sampling, {**setting, **extra}, texts, args.seed)
        layers = sorted(k for k in m if k.startswith("mismatch_router_diff_l"))
        per_layer = " / ".join(f"{m[k]:.3f}" for k in layers)
        name = ", ".join(f"{k} {v}" for k, v in setting.items()) or "none"
        print(
            f"| {name} | {m['mismatch_router_diff']:.4f} | {m['mismatch_expert_diff']:.4f} | {per_layer} | "
            f"{m['mismatch_kl_k3']:.2e} | {m['mismatch_dis_out_of_band']:.4f} | {m['abs_log_r_flipped']:.4f} / "
            f"{m['abs_log_r_kept']:.4f} | {m['out_of_band_flipped']:.2f} | {time.perf_counter() - started:.0f} |"
        )


if __name__ == "__main__":
    main()
