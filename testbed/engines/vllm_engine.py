"""vLLM as the rollout engine (an optional extra: `make vllm` builds `.venv-vllm`, docs/vllm.md).

An in-process `vllm.LLM` on the policy written in the Hub format, fed and read as token ids (no
re-tokenisation: `skip_tokenizer_init`). Sampling is softmax(logits / T) with top-p 1, top-k and
min-p off, and the log-prob of each sampled token is vLLM's *processed* one (after temperature,
`logprobs_mode="processed_logprobs"`), so the behaviour distribution is the one the trainer scores;
whatever differs (kernels, MoE routing, precision) is the training-inference mismatch that
`testbed.engines.mismatch` measures and DIS absorbs.

Weights move by version without touching the disk: `load_weights` hands the policy's tensors, in
checkpoint names (transformers' `revert_weight_conversion`), to vLLM's in-place `reload_weights`
on its worker (on CPU the MoE experts go in through `load_cpu_experts` instead, see
`stacked_experts`), then verifies the sync with a log-prob probe: a fixed sequence scored by vLLM
(prompt log-probs) must match the trainer's forward on the new weights within `probe_tolerance`,
or the sync raises.

The routed experts of every fed token come back from vLLM itself (`enable_return_routed_experts`,
vLLM PR #28284: `CompletionOutput.routed_experts`, [prompt + output - 1,
layers, top_k]) into the Trajectory's record (`record_experts`), for `mismatch_expert_diff` and
`routing_replay: r3`. vLLM's CPU build cannot return them (only its model runner V2 does, which
needs Triton), so there the engine asks for none (`record_experts` unset) and refuses `true`; where
a build returns none anyway, the engine says so once and its episodes carry no record (the probe's
expert columns stay nan and r3 refuses them). The engine's own `router_noise` / `router_rounding` are the HF
engine's: vLLM routes with its own kernels.

vLLM is imported only when this engine is built, so the scenario schema validates `engine: vllm`
(its `Config`) in an environment without it.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from testbed.engines.recording import extended
from testbed.engines.streams import request_seed
from testbed.models.lora import base_model, has_adapters, merged_copy, merged_state
from testbed.models.modules import moe_shape
from testbed.models.policy import token_logprobs
from testbed.models.routing import compact
from testbed.types import Segment, Trajectory
from testbed.world import prompts, render_prompt

# The probe's response is sampled once, at start-up, with this seed (not from torch's generator).
PROBE_SEED = 12345


class VLLMConfig(BaseModel):
    """`engine.args` of `engine: vllm` (checked when the scenario loads)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    dtype: str = Field("float32", description="vLLM's dtype; float32 keeps the mismatch at kernel rounding")
    enforce_eager: bool = Field(
        True, description="no torch.compile / CUDA graphs (start-up in seconds; tiny models gain little)"
    )
    kv_cache_gb: float = Field(
        1.0, gt=0, description="KV cache: VLLM_CPU_KVCACHE_SPACE on CPU, kv_cache_memory_bytes otherwise"
    )
    cpu_threads_bind: str | int | None = Field(
        None,
        description=(
            "VLLM_CPU_OMP_THREADS_BIND on CPU ('auto', 'nobind' or core ids like 1 or '0-1'); unset: vLLM's default"
        ),
    )
    max_num_seqs: int = Field(256, ge=1, description="sequences vLLM decodes at once")
    probe_tolerance: float = Field(
        1e-3,
        gt=0,
        description=(
            "largest mean |log p vLLM - log p trainer| over the probe after a sync (float32: ~1e-6; bfloat16: ~1e-2)"
        ),
    )
    verify_sync: bool = Field(True, description="score the probe after every sync (off: trust the copy)")
    record_experts: bool | None = Field(
        None,
        description=(
            "ask vLLM for the routed experts of every token (enable_return_routed_experts), for mismatch_expert_diff "
            "and routing_replay: r3; unset: on except on vLLM's CPU build, which cannot return them"
        ),
    )
    directory: str | None = Field(None, description="where the Hub-format export goes (default: a temporary directory)")


def check_usable(model: torch.nn.Module) -> None:
    """vLLM importable, and a head size its CPU attention takes; else say what to do."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"engine: vllm: vLLM is not importable in this environment ({exc}); build the vLLM "
            "environment with `make vllm` and run with .venv-vllm/bin/python (docs/vllm.md)"
        ) from None
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if on_cpu() and head_dim % 32:
        raise ValueError(
            f"engine: vllm: vLLM's CPU attention takes head sizes 32, 64, ...; this policy's is {head_dim} "
            "(policy.hidden_size / policy.num_heads: e.g. hidden_size 64 with num_heads 2)"
        )


def records_experts(asked: bool | None) -> bool:
    """Whether to ask vLLM for the routed experts: as asked, else wherever it can return them. Its
    CPU build cannot (only the model runner V2 returns them, which needs Triton: "AuxOutput Connector
    requires Model Runner V2"), so asking there is refused here, naming the setting."""
    if asked is None:
        return not on_cpu()
    if asked and on_cpu():
        raise ValueError(
            "engine.args.record_experts: vLLM's CPU build cannot return routed experts (enable_return_routed_experts "
            "needs its model runner V2, which needs Triton); unset it (docs/vllm.md)"
        )
    return asked


def on_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (the vllm-cpu build), not where torch could run."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMEngine:
    """`engine: vllm`. Built as `VLLMEngine(policy, tokenizer, sampling, **args)` like every engine;
    returns the same Trajectories as `HFEngine` (one action segment of sampled ids, each with its
    behaviour log-prob, up to and including the first stop id)."""

    Config = VLLMConfig

    def __init__(self, model: torch.nn.Module, tokenizer: Any, sampling: Any, **args: Any):
        self.cfg = VLLMConfig.model_validate(args)
        check_usable(model)
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.stop_ids = tuple(getattr(tokenizer, "stop_ids", (tokenizer.eos_id,)))
        self.version = 0
        self.records_experts = records_experts(self.cfg.record_experts)
        self._said_no_experts = False
        self.last_sync: dict[str, float] = {}
        self._scratch = None if self.cfg.directory else tempfile.TemporaryDirectory(prefix="testbed-vllm-")
        self.directory = Path(self.cfg.directory or self._scratch.name)
        self.llm = self._start()
        self.probe_ids = self._probe_ids()
        self.verify()

    # -- start-up ---------------------------------------------------------------------------------

    def _start(self) -> Any:
        """Write the policy in the Hub format and start vLLM on it, in this process."""
        from transformers import GenerationConfig

        self.directory.mkdir(parents=True, exist_ok=True)
        # a LoRA policy (policy.lora) starts vLLM on its merged weights: vLLM holds a plain model
        (merged_copy(self.model) if has_adapters(self.model) else self.model).save_pretrained(self.directory)
        tok = self.tokenizer
        GenerationConfig(
            bos_token_id=getattr(tok, "bos_id", None), eos_token_id=list(self.stop_ids), pad_token_id=tok.pad_id
        ).save_pretrained(self.directory)
        # Why in-process: the weight sync hands tensors to the worker without serialising them.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        memory: dict[str, Any] = {}
        if not on_cpu():
            memory["kv_cache_memory_bytes"] = int(self.cfg.kv_cache_gb * 2**30)
        else:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(self.cfg.kv_cache_gb)))
            if self.cfg.cpu_threads_bind is not None:
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(self.cfg.cpu_threads_bind)
        from vllm import LLM

        if self.records_experts:
            memory["enable_return_routed_experts"] = True
        return LLM(
            model=str(self.directory),
            dtype=self.cfg.dtype,
            skip_tokenizer_init=True,
            enforce_eager=self.cfg.enforce_eager,
            enable_prefix_caching=False,  # no KV from old weights
            logprobs_mode="processed_logprobs",
            max_model_len=self.model.config.max_position_embeddings,
            max_num_seqs=self.cfg.max_num_seqs,
            seed=int(torch.randint(2**31 - 1, ()).item()),
            **memory,
        )

    def _probe_ids(self) -> list[int]:
        """The sync check's fixed sequence: a training prompt and the starting policy's own response
        to it (a fixed seed). Likely tokens, so that in bfloat16 the probe's gap is the sampled
        tokens' (~1e-2), not that of improbable ones (log-probs near -20 carry errors near 0.1)."""

        ids = self.tokenizer.prompt_ids(render_prompt(prompts("train")[0], ["academic", "cute", "chuunibyou"]))
        response, _, _ = self._sample([ids], seeds=[PROBE_SEED])[0]
        return [*ids, *response]

    # -- weights ----------------------------------------------------------------------------------

    def load_weights(self, state_dict: dict | None, version: int) -> None:
        """Take version `version`: `state_dict` (a remote engine), or the shared policy module as it
        is now (the synchronous runtime passes None), copied into vLLM in place and verified."""
        if state_dict is None and version == self.version:  # a skipped step or a critic-only update: nothing moved
            self.last_sync = {}
            return
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        started = time.perf_counter()
        weights = checkpoint_tensors(self.model)
        experts = stacked_experts(weights) if on_cpu() else {}
        rest = [(k, v) for k, v in weights.items() if not any(k.startswith(prefix + ".") for prefix in experts)]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": rest})
        if experts:
            loaded = self.llm.collective_rpc(load_cpu_experts, args=(experts,))[0]
            if loaded != len(experts):
                raise RuntimeError(f"vLLM weight sync: {loaded} of {len(experts)} expert layers found in vLLM's model")
        self.version = version
        self.last_sync = {"sync_s": time.perf_counter() - started}
        if self.cfg.verify_sync:
            self.verify()

    def verify(self) -> float:
        """Score the probe with vLLM and with the trainer's forward on the policy module; raise if
        they differ by more than `probe_tolerance` on average (the sync did not take, or vLLM
        computes another function). Returns the mean gap."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        out = self.llm.generate([TokensPrompt(prompt_token_ids=self.probe_ids)], params, use_tqdm=False)[0]
        ids = self.probe_ids
        engine = torch.tensor([entry[tok].logprob for entry, tok in zip(out.prompt_logprobs[1:], ids[1:])])
        tokens = torch.tensor([ids])
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            trainer, _ = token_logprobs(self.model, tokens, torch.ones_like(tokens), 1.0)
        self.model.train(was_training)
        diff = (engine.double() - trainer[0, 1:].double()).abs()
        # The mean, not the max: in bfloat16 a single improbable probe token can be off by ~1 while a
        # sync that did not take moves them all.
        gap = float(diff.mean())
        self.last_sync.update({"sync_probe_mean_abs": gap, "sync_probe_max_abs": float(diff.max())})
        if not gap <= self.cfg.probe_tolerance:
            raise RuntimeError(
                f"vLLM weight sync to version {self.version}: the probe's log-probs differ from the "
                f"trainer's by {gap:.3g} on average (engine.args.probe_tolerance={self.cfg.probe_tolerance})"
            )
        return gap

    # -- sampling ---------------------------------------------------------------------------------

    def _seeds(self, streams: list[int] | None, turns: list[int]) -> list[int] | None:
        """Per-request seeds from the episodes' streams under `sampling.streams: episode` (the same
        seed for the same episode and turn in every arm: vLLM's own common random numbers)."""
        if self.sampling.streams != "episode":
            return None
        if streams is None or len(streams) != len(turns):
            raise ValueError("sampling.streams: episode needs one stream per prompt (EpisodeStart.stream)")
        return [request_seed(stream, turn) for stream, turn in zip(streams, turns)]

    def generate(self, prompts: list[str], n: int = 1, streams: list[int] | None = None) -> list[Trajectory]:
        """n samples per prompt, in prompt order (prompt 0's n samples first)."""
        expanded = [p for p in prompts for _ in range(n)]
        encoded = [self.tokenizer.prompt_ids(p) for p in expanded]
        each = None if streams is None else [s for s in streams for _ in range(n)]
        seeds = self._seeds(each, [j for _ in prompts for j in range(n)])
        return [
            Trajectory(
                prompt_tokens=ids,
                segments=[Segment("action", new, lps)],
                prompt_text=prompt,
                response_text=self.tokenizer.decode(new),
                policy_version=self.version,
                experts=experts,
            )
            for prompt, ids, (new, lps, experts) in zip(expanded, encoded, self._sample(encoded, seeds))
        ]

    def extend(self, trajectories: list[Trajectory], observations: list[str], streams: list[int] | None = None) -> None:
        """Multi-turn episodes, as `HFEngine.extend`: an observation segment, then a new draft
        sampled with the whole trajectory so far as context."""
        if len(trajectories) != len(observations):
            raise ValueError(f"got {len(trajectories)} trajectories but {len(observations)} observations")
        seen = [self.tokenizer.observation_ids(o) for o in observations]
        contexts = [[*t.prompt_tokens, *t.response_tokens, *o] for t, o in zip(trajectories, seen)]
        seeds = self._seeds(streams, [t.turns for t in trajectories])
        for traj, obs, (ids, lps, experts) in zip(trajectories, seen, self._sample(contexts, seeds)):
            fed = len(traj.prompt_tokens) + len(traj.response_tokens) - 1  # positions recorded before
            traj.segments += [Segment("observation", obs), Segment("action", ids, lps)]
            traj.response_text = self.tokenizer.decode(ids)
            traj.policy_version = self.version
            traj.experts = extended(traj.experts, fed, experts)

    def _sample(
        self, contexts: list[list[int]], seeds: list[int] | None = None
    ) -> list[tuple[list[int], list[float], np.ndarray | None]]:
        """One continuation per context with the log-prob of each sampled token and the routed
        experts of every fed token (`routed_experts`). Each request gets its own seed from torch's
        generator, so a run is reproducible per seed whatever the batch."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        seeds = seeds or torch.randint(2**31 - 1, (len(contexts),)).tolist()
        params = [
            SamplingParams(
                temperature=self.sampling.temperature,
                top_p=1.0,
                top_k=0,
                min_p=0.0,
                seed=seed,
                max_tokens=self.sampling.max_new_tokens,
                stop_token_ids=list(self.stop_ids),
                logprobs=0,
                detokenize=False,
            )
            for seed in seeds
        ]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=c) for c in contexts], params, use_tqdm=False)
        result = []
        for out in outs:
            done = out.outputs[0]
            ids = list(done.token_ids)
            lps = [entry[tok].logprob for entry, tok in zip(done.logprobs, ids)]
            if not all(math.isfinite(lp) for lp in lps):
                raise FloatingPointError(f"the policy (version {self.version}) gives NaN/inf log-probs in vLLM")
            result.append((ids, lps, self._experts(done, len(out.prompt_token_ids or ()) + len(ids) - 1)))
        return result

    def _experts(self, done: Any, fed: int) -> np.ndarray | None:
        """vLLM's `CompletionOutput.routed_experts` ([prompt + output - 1, layers, top_k], with
        enable_return_routed_experts) as the Trajectory's record; None where vLLM gives none
        (said once: mismatch_expert_diff stays nan, routing_replay r3 is refused)."""
        routed = getattr(done, "routed_experts", None) if self.records_experts else None
        if routed is None or len(routed) < fed:
            if self.records_experts and not self._said_no_experts:
                self._said_no_experts = True
                warnings.warn(
                    "engine: vllm returned no routed experts for a request (this vLLM build or platform does not "
                    "capture them): its episodes carry no expert ids",
                    stacklevel=2,
                )
            return None
        shape = moe_shape(self.model.config)
        return compact(torch.as_tensor(np.asarray(routed)[:fed]), shape[0] if shape else 2**15)


# Checkpoint names of an expert's three matrices (Qwen-MoE / OLMoE style, and Mixtral's w1, w3, w2).
EXPERT_PARTS = {"gate": ("gate_proj", "w1"), "up": ("up_proj", "w3"), "down": ("down_proj", "w2")}
EXPERT_KEY = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<e>\d+)\.(?P<part>\w+)\.weight$")


def stacked_experts(weights: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Routed experts in vLLM's fused layout per layer, {checkpoint prefix: (w13 [E, 2I, H] with
    the gate rows first, w2 [E, H, I])}.

    Why: on CPU vLLM 0.32 prepacks expert weights into its grouped-GEMM layout at load time, and its
    in-place `reload_weights` leaves them wrong (the probe saw log-probs off by ~11 after reloading
    the very same weights); `load_cpu_experts` repacks them with vLLM's own kernel code instead."""
    parts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    names = {alias: role for role, aliases in EXPERT_PARTS.items() for alias in aliases}
    for key, value in weights.items():
        match = EXPERT_KEY.match(key)
        if match and match["part"] in names:
            parts.setdefault(match["prefix"], {}).setdefault(int(match["e"]), {})[names[match["part"]]] = value
    out = {}
    for prefix, experts in parts.items():
        order = sorted(experts)
        if order != list(range(len(order))) or any(len(experts[e]) != 3 for e in order):
            raise ValueError(f"vLLM weight sync: {prefix} does not hold gate, up and down for experts 0..n-1")
        out[prefix] = (
            torch.stack([torch.cat([experts[e]["gate"], experts[e]["up"]]) for e in order]),
            torch.stack([experts[e]["down"] for e in order]),
        )
    return out


def load_cpu_experts(worker: Any, experts: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Runs on vLLM's worker (`collective_rpc`): put each layer's experts in place and let the
    layer's own expert kernel pad and prepack them, as at load time. Returns the layers loaded."""
    from vllm.model_executor.utils import replace_parameter

    loaded = 0
    for name, module in worker.model_runner.get_model().named_modules():
        prefix = next((p for p in experts if name == p or name.startswith(p + ".")), None)
        if prefix is None or not hasattr(module, "w13_weight"):
            continue
        w13, w2 = experts[prefix]
        replace_parameter(module, "w13_weight", w13.to(module.w13_weight.dtype).clone())
        replace_parameter(module, "w2_weight", w2.to(module.w2_weight.dtype).clone())
        module.quant_method.moe_kernel.fused_experts.process_weights_after_loading(module)
        loaded += 1
    return loaded


def checkpoint_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors under the names its checkpoint files use (transformers 5 fuses e.g. the
    experts in memory and splits them again on save; vLLM loads the saved layout). A LoRA policy's
    adapters are merged first, under the base model's names."""
    state = merged_state(model)
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # an older transformers keeps the checkpoint layout in memory
        return state
    return revert_weight_conversion(base_model(model), state)
