"""The memory plan of a scenario (in `--dry-run`) or of a config.json alone (this module's CLI).

    python -m testbed.cli.memory_plan scenarios/model_configs/qwen3-30b-a3b --gpu-gb 141 --gpus 1 8

The maths is testbed/models/memory.py; this reads the settings from a scenario, the device's
memory (CUDA's where there is CUDA, else `runtime.device_memory_gb`, else the host's), and says
what does not fit, naming the largest item and the settings that would shrink it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from testbed import registry
from testbed.models.memory import GB, ModelShape, Settings, plan, size
from testbed.scenario.lora import DEFAULT_TARGETS
from testbed.scenario.schema import Scenario

PROMPT_TOKENS = 192  # a rendered prompt with its candidate styles, in a Hub tokenizer's tokens


def device_bytes(runtime: Any) -> tuple[int, str]:
    """(bytes of one device, where the figure comes from)."""
    import torch

    if runtime.device != "cpu" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[1]), "torch.cuda.mem_get_info"
    if runtime.device_memory_gb is not None:
        return int(runtime.device_memory_gb * GB), "runtime.device_memory_gb"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "the host's memory"


def dtype_of(model: Any) -> str:
    name = str(getattr(model.config, "torch_dtype", None) or getattr(model.config, "dtype", None) or "float32")
    return name.removeprefix("torch.") if name.removeprefix("torch.") in ("bfloat16", "float16") else "float32"


def settings_for(scenario: Scenario, arm: Any, model: Any, trainer: Any) -> Settings:
    """The plan's settings for one arm: the runtime's, and the trainer's as the trainer has them
    (`trainer`, built on the meta device, and its Config with its defaults filled in), never
    restated here."""
    rt = scenario.runtime_for(arm)
    cfg = registry.check_args("trainer", arm.trainer_class(), arm.args)  # None for a trainer without a Config
    per_update = trainer.episodes_per_update
    critic = getattr(cfg, "critic_trainable", None) if getattr(trainer, "critic", None) is not None else None
    return Settings(
        dtype=dtype_of(model) if scenario.policy.checkpoint else "float32",
        strategy=rt.learner_strategy,
        learner_workers=rt.learner_workers if rt.kind == "ray" else 1,
        rollout_workers=rt.rollout_workers if rt.kind == "ray" else 1,
        param_dtype=rt.fsdp.param_dtype,
        offload=rt.fsdp.offload,
        activation_checkpointing=rt.fsdp.activation_checkpointing,
        micro_batch_tokens=rt.micro_batch_tokens,
        # SAO's value pretraining runs the critic on batches of their own size
        episodes_per_update=max(per_update, getattr(cfg, "value_pretrain_batch", per_update)),
        round_episodes=per_update,
        prompt_tokens=PROMPT_TOKENS if scenario.policy.checkpoint else scenario.policy.max_positions // 2,
        new_tokens=scenario.sampling.max_new_tokens,
        critic=critic,
        critic_lora_r=cfg.critic_lora_r if critic == "lora" else 0,
        lora_targets=scenario.policy.lora.target_modules if scenario.policy.lora else None,
        lora_r=scenario.policy.lora.r if scenario.policy.lora else 8,
        reference=getattr(trainer, "reference", None) is not None,  # the KL anchor's copy, when kl_coef > 0
        separate_processes=rt.kind == "ray",
        device_share=min(1.0, rt.actor_gpus) if rt.kind == "ray" and rt.actor_gpus else 1.0,
    )


def scenario_memory(scenario: Scenario, model: Any, trainers: list[Any]) -> dict[str, Any]:
    """Each arm's plan (`trainers`: the arms' trainers, built on the meta device, in arm order),
    the device's memory and its source (what the dry-run prints)."""
    shape = ModelShape.of(model)
    memory, source = device_bytes(scenario.runtime)
    arms = {
        arm.name: plan(shape, settings_for(scenario, arm, model, trainer), memory)
        for arm, trainer in zip(scenario.arms, trainers)
    }
    return {"device_source": source, "arms": arms}


def refusal(memory: dict[str, Any]) -> str | None:
    """Why the scenario cannot run on this device, naming the largest item, or None if it fits."""
    for name, p in memory["arms"].items():
        if not p["fits"]:
            big = p["largest"]
            total = p["processes"][big["process"]]["total"]
            return (
                f"memory plan: arm {name}'s {big['process']} needs {size(total)}, more than {size(p['budget_bytes'])} "
                f"(the share a plan may fill of {size(p['device_bytes'])}, {memory['device_source']}); the largest "
                f"item is {big['item']} ({size(big['bytes'])}). It would fit with: {'; '.join(p['fixes'])}"
            )
    return None


def config_rows(directory: str, gpu_gb: float, gpus: list[int]) -> list[dict[str, Any]]:
    """The docs' table: a config.json's learner rank under the settings that matter, per GPU count."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory))
    shape, rows = ModelShape.of(model), []
    for workers in gpus:
        choices = [("replicate", False, False, False)]
        if workers == 1:  # the synchronous runtime, one process: LoRA policy and critic
            choices.append(("sync", False, False, True))
        else:
            choices += [("fsdp", True, False, False), ("fsdp", True, True, False)]
        for strategy, ckpt, offload, lora in choices:
            s = Settings(
                dtype="bfloat16",
                strategy="replicate" if strategy == "sync" else strategy,
                learner_workers=workers,
                param_dtype="bfloat16",
                offload=offload,
                activation_checkpointing=ckpt,
                prompt_tokens=PROMPT_TOKENS,
                new_tokens=256,
                critic="lora" if lora else "moe",
                lora_targets=DEFAULT_TARGETS if lora else None,
                separate_processes=strategy != "sync",
            )
            p = plan(shape, s, int(gpu_gb * GB))
            learner = p["processes"].get("learner rank") or p["processes"]["process"]
            actor = p["processes"].get("rollout actor")
            build = p["processes"].get("learner rank, building")
            name = f"{strategy}{' + checkpointing' if ckpt else ''}{' + offload' if offload else ''}"
            rows.append(
                {
                    "gpus": workers,
                    "settings": "synchronous, LoRA policy + critic (r 8)" if lora else name,
                    "learner_gb": learner["total"] / GB,
                    "actor_gb": actor["total"] / GB if actor else None,
                    "build_gb": build["total"] / GB if build else None,
                    "fits": p["fits"],
                }
            )
    return [{"parameters": shape.parameters, "moe_parameters": shape.moe_parameters}, *rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config_dirs", nargs="+", help="directories with a config.json")
    parser.add_argument("--gpu-gb", type=float, default=141.0)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args(argv)
    columns = ["model", "parameters", "GPUs", "learner settings", "learner rank GB", "while building"]
    print(f"| {' | '.join(columns)} | rollout actor GB | fits |")
    print("|---|---|---|---|---|---|---|---|")
    for directory in args.config_dirs:
        head, *rows = config_rows(directory, args.gpu_gb, args.gpus)
        for row in rows:
            actor = "-" if row["actor_gb"] is None else f"{row['actor_gb']:.1f}"  # the synchronous runtime has none
            build = "-" if row["build_gb"] is None else f"{row['build_gb']:.1f}"  # only a sharded rank builds whole
            print(
                f"| {os.path.basename(directory.rstrip('/'))} | {head['parameters'] / 1e9:.2f}B | {row['gpus']} | "
                f"{row['settings']} | {row['learner_gb']:.1f} | {build} | {actor} | "
                f"{'yes' if row['fits'] else 'no'} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
