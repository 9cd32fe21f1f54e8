"""Batched sampling from a transformers policy with KV cache, returning Trajectories that carry
the behaviour log-prob of every generated token (what DIS and the IS ratios need)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from testbed.engines.perturb import LogitPerturbation
from testbed.engines.recording import ExpertRecorder, extended
from testbed.engines.streams import episode_uniforms
from testbed.models.decoder import LeanDecoder
from testbed.models.lora import has_adapters
from testbed.models.modules import moe_shape
from testbed.models.router_hooks import router_hooks
from testbed.models.routing import RouterPerturbation
from testbed.models.tokenizer import WordTokenizer
from testbed.scenario.schema import SamplingConfig
from testbed.types import Segment, Trajectory


def sample_categorical(logp: torch.Tensor, u: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row [B, 1] from softmax(logp) by inverting the CDF with one uniform per row
    (`u` [B, 1] float64 in [0, 1), drawn here if not given).

    Exactly the categorical law (a token of probability 0 is never drawn), and far cheaper than
    `torch.multinomial`, which on CPU draws an exponential variate for every vocabulary entry
    (a quarter of the decoding time in the profile). The CDF is summed in float64 so its rounding
    stays far below any probability that matters."""
    cdf = logp.double().exp().cumsum(-1)
    if u is None:  # drawn by the CPU generator (the one checkpoints save), on any device
        u = torch.rand(logp.shape[0], 1, dtype=torch.float64).to(logp.device)
    # right=True: the first index whose cdf exceeds u, so cdf[i-1] <= u < cdf[i]; clamp for nan rows
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=logp.shape[-1] - 1)


def left_padded(encoded: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention) [B, W] of left-padded contexts, built on the CPU: every row continues at
    the right edge."""
    batch, width = len(encoded), max(len(e) for e in encoded)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


# Drop finished rows from the lean decoder's batch once they are 1/COMPACT_SHARE of it: each drop
# copies the KV cache, so dropping at every single <eos> would cost more than it saves.
COMPACT_SHARE = 4


class HFEngine:
    """Samples at a fixed temperature with no top-k/top-p truncation, so the behaviour
    distribution is exactly softmax(logits / T) and its log-probs are exact.

    The decoding loop is written out (left-padded prompts, explicit position ids) rather than
    calling `model.generate`, so that positions, stopping and the log-probs of exactly the sampled
    distribution are visible in one place. The testbed's own Qwen3-MoE shape runs through the lean
    forward of `testbed.models.decoder` (static KV cache, fused ops; the same function to float
    rounding); any other causal LM, e.g. a real checkpoint, through transformers' forward with a
    `DynamicCache` (`lean=False` forces that path, for comparisons).

    In the synchronous loop the engine and the trainer share one model object, so
    `load_weights(None, version)` only records the version; a remote engine copies the tensors.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: WordTokenizer,
        sampling: SamplingConfig,
        max_batch: int = 128,
        lean: bool = True,
        logit_rounding: str | None = None,
        logit_noise: float = 0.0,
        noise_seed: int = 0,
        router_rounding: str | None = None,
        router_noise: float = 0.0,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.max_batch = max_batch
        self.version = 0
        # Training-inference mismatch on purpose (testbed/engines/perturb.py); off by default.
        self.perturb = LogitPerturbation(logit_rounding, logit_noise, noise_seed)  # type: ignore[arg-type]
        # The lean forward (testbed/models/decoder.py) where the model is the shape it knows; not
        # under LoRA adapters (it reads the base weights directly): transformers' forward applies them.
        self.lean = LeanDecoder(model) if lean and LeanDecoder.supports(model) and not has_adapters(model) else None
        # Routing mismatch on purpose, in every MoE layer's router (testbed/models/routing.py); off by default.
        router = RouterPerturbation(router_rounding, router_noise, noise_seed)  # type: ignore[arg-type]
        self.router_perturb = router if router.active else None
        if self.lean is not None:
            self.lean.router_perturb = self.router_perturb
        shape = moe_shape(getattr(model, "config", None))
        if self.router_perturb is not None and shape is None:
            raise ValueError("engine.args.router_noise / router_rounding: the policy has no MoE router")
        self.num_experts = shape[0] if shape else 0
        # A Hub tokenizer may end a response at several ids (its eos and the generation config's).
        self.stop_ids = tuple(getattr(tokenizer, "stop_ids", (tokenizer.eos_id,)))
        self._stops = torch.tensor(self.stop_ids)  # moved to the model's device per batch

    def load_weights(self, state_dict: dict | None, version: int) -> None:
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self.version = version

    def _keys(self, streams: list[int] | None, rows: int, n: int = 1) -> list[tuple[int, int]] | None:
        """(stream, turn) per row under `sampling.streams: episode` (None: the run's generator).
        The j-th of n samples of a prompt counts as the prompt's turn j, so it draws its own numbers."""
        if self.sampling.streams != "episode":
            return None
        if streams is None or len(streams) * n != rows:
            raise ValueError(
                "sampling.streams: episode needs one stream per prompt (testbed.envs.episode.EpisodeStart.stream); "
                f"got {'none' if streams is None else len(streams)} for {rows // n} prompts"
            )
        return [(int(stream), j) for stream in streams for j in range(n)]

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int = 1, streams: list[int] | None = None) -> list[Trajectory]:
        """n samples per prompt, in prompt order (prompt 0's n samples first); `streams`: one per
        prompt, read under `sampling.streams: episode`."""
        expanded = [p for p in prompts for _ in range(n)]
        keys = self._keys(streams, len(expanded), n)
        out: list[Trajectory] = []
        for i in range(0, len(expanded), self.max_batch):
            out += self._generate_batch(expanded[i : i + self.max_batch], keys and keys[i : i + self.max_batch])
        return out

    @torch.no_grad()
    def extend(self, trajectories: list[Trajectory], observations: list[str], streams: list[int] | None = None) -> None:
        """Continue each trajectory in place (multi-turn episodes): the environment's text as an
        observation segment, then a new draft as an action segment, sampled with the whole
        trajectory so far as context (re-encoded, not a kept KV cache). `response_text` becomes
        the new draft. Under episode streams the draft is its stream's next turn."""
        if len(trajectories) != len(observations):
            raise ValueError(f"got {len(trajectories)} trajectories but {len(observations)} observations")
        tok = self.tokenizer
        seen = [tok.observation_ids(o) for o in observations]
        contexts = [[*t.prompt_tokens, *t.response_tokens, *o] for t, o in zip(trajectories, seen)]
        keys = self._keys(streams, len(trajectories))
        if keys is not None:  # turn = the drafts written so far
            keys = [(stream, t.turns) for (stream, _), t in zip(keys, trajectories)]
        for i in range(0, len(contexts), self.max_batch):
            batch_keys = keys and keys[i : i + self.max_batch]
            sampled = self._sample(contexts[i : i + self.max_batch], batch_keys)
            for j, (ids, lps, experts) in enumerate(sampled, start=i):
                traj = trajectories[j]
                fed = len(traj.prompt_tokens) + len(traj.response_tokens) - 1  # positions recorded before
                traj.segments += [Segment("observation", seen[j]), Segment("action", ids, lps)]
                traj.response_text = tok.decode(ids)
                traj.policy_version = self.version
                traj.experts = extended(traj.experts, fed, experts)

    def _generate_batch(self, prompts: list[str], keys: list[tuple[int, int]] | None) -> list[Trajectory]:
        encoded = [self.tokenizer.prompt_ids(p) for p in prompts]
        return [
            Trajectory(
                prompt_tokens=ids,
                segments=[Segment("action", new, lps)],
                prompt_text=prompt,
                response_text=self.tokenizer.decode(new),
                policy_version=self.version,
                experts=experts,
            )
            for prompt, ids, (new, lps, experts) in zip(prompts, encoded, self._sample(encoded, keys))
        ]

    def _sample(
        self, encoded: list[list[int]], keys: list[tuple[int, int]] | None = None
    ) -> list[tuple[list[int], list[float], np.ndarray | None]]:
        """One continuation per context, up to and including its first <eos> (or max_new_tokens),
        with the behaviour log-prob of every sampled token and the expert ids of every fed token
        (testbed/engines/recording.py; None for a model without routers). `keys`: (stream, turn)
        per context, whose uniforms pick its tokens (episode streams); None: the run's CPU generator."""
        tok, temperature = self.tokenizer, self.sampling.temperature
        batch = len(encoded)
        device = next(self.model.parameters()).device
        input_ids, attention = (t.to(device) for t in left_padded(encoded, tok.pad_id))  # moved once per batch
        stops = self._stops.to(device)

        was_training = self.model.training
        self.model.eval()
        steps = self.sampling.max_new_tokens
        if self.lean is not None:
            logits = self.lean.start(input_ids, attention, steps)
            advance, routing = self.lean.step, self.lean.routing
        else:
            logits, advance, routing = self._hf_decoder(input_ids, attention)
        recorder = ExpertRecorder(self.num_experts)
        recorder.prefill(routing(), steps)
        # Rows run until their <eos>; tokens after it are cut below, so a finished row may keep
        # running until enough have finished to be worth dropping from the batch (lean path only).
        generated = torch.full((batch, steps), tok.eos_id, dtype=torch.long, device=device)
        logprob_table = torch.zeros(batch, steps, device=device)
        active = torch.arange(batch, device=device)  # the original row of each row still in the batch
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        # Episode streams: every row's uniforms for the whole response, from its own stream.
        table = None if keys is None else episode_uniforms([k[0] for k in keys], [k[1] for k in keys], steps).to(device)
        for step in range(steps):
            logp = F.log_softmax(self.perturb(logits).float() / temperature, dim=-1)  # perturb: off by default
            # One uniform per row of the whole batch at every step: each row's draws are the same
            # whichever other rows are still running. Drawn by the CPU generator (the one checkpoints
            # save), so a run samples the same stream and resumes exactly on any device.
            u = torch.rand(batch, 1, dtype=torch.float64).to(device) if table is None else table[:, step : step + 1]
            sampled = sample_categorical(logp, u[active])
            generated[active, step] = sampled[:, 0]
            logprob_table[active, step] = logp.gather(-1, sampled)[:, 0]
            finished[active] |= torch.isin(sampled[:, 0], stops)
            if finished.all() or step == steps - 1:
                break
            done = finished[active]
            if self.lean is not None and int(done.sum()) * COMPACT_SHARE >= len(active):
                keep = (~done).nonzero()[:, 0]
                active, sampled = active[keep], sampled[keep]
                self.lean.keep(keep)
            logits = advance(sampled[:, 0])
            recorder.step(active, step, routing())
        self.model.train(was_training)
        return self._rows(generated[:, : step + 1].cpu(), logprob_table[:, : step + 1].cpu(), encoded, recorder)

    def _rows(
        self, generated: torch.Tensor, logprob_table: torch.Tensor, encoded: list[list[int]], recorder: ExpertRecorder
    ) -> list[tuple[list[int], list[float], np.ndarray | None]]:
        """Each row's tokens up to and including its first stop id (the policy learns when to
        stop), their log-probs and its fed tokens' expert ids."""
        # One check per batch instead of one per step: non-finite logits (weights blown up by an
        # update) make the sampled token's log-prob nan or inf; say so, not "index out of range".
        bad = ~torch.isfinite(logprob_table)
        if bad.any():
            step = int(bad.any(0).nonzero()[0, 0])
            raise FloatingPointError(
                f"the policy (version {self.version}) gives NaN/inf logits at decoding step {step}"
            )
        rows = generated.tolist()
        lengths = [next((i + 1 for i, t in enumerate(ids) if t in self.stop_ids), len(ids)) for ids in rows]
        records = recorder.records([len(e) for e in encoded], lengths)
        return [
            (ids[:length], logprob_table[row, :length].tolist(), records[row])
            for row, (ids, length) in enumerate(zip(rows, lengths))
        ]

    def _hf_decoder(self, input_ids: torch.Tensor, attention: torch.Tensor):
        """The general path (any causal LM, e.g. a real checkpoint): transformers' forward with a
        `DynamicCache` and router hooks (testbed/models/router_hooks.py) that record, and perturb
        where asked, the routing; returns the first logits, a function that feeds one token per row
        and one that gives the last forward's expert ids ([B, W, L, k], then [B, L, k]; None without
        routers)."""
        positions = (attention.cumsum(1) - 1).clamp(min=0)
        cache = DynamicCache()
        record: list[torch.Tensor] = []
        state: dict[str, Any] = {"attention": attention, "position": positions[:, -1:] + 1, "prefill": True}

        def forward(**kwargs):
            record.clear()
            with router_hooks(self.model, perturb=self.router_perturb, record=record):
                return self.model(cache=cache, use_cache=True, **kwargs).logits[:, -1]

        def advance(sampled: torch.Tensor) -> torch.Tensor:
            state["attention"] = torch.cat([state["attention"], torch.ones_like(state["attention"][:, :1])], dim=1)
            out = forward(input_ids=sampled[:, None], attention_mask=state["attention"], position_ids=state["position"])
            state["position"], state["prefill"] = state["position"] + 1, False
            return out

        def routing() -> torch.Tensor | None:
            if not record:
                return None
            ids = torch.stack(record, dim=1)  # [B * S, L, k]
            ids = ids.view(input_ids.shape[0], -1, *ids.shape[1:])
            return ids if state["prefill"] else ids[:, 0]

        logits = forward(input_ids=input_ids, attention_mask=attention, position_ids=positions)
        return logits, advance, routing
