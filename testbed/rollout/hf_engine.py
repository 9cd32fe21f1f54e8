"""Batched sampling from a transformers policy with KV cache, returning Trajectories that carry
the behaviour log-prob of every generated token (what DIS and the IS ratios need)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GenerationConfig

from testbed.config import SamplingConfig
from testbed.models.tokenizer import WordTokenizer
from testbed.types import Segment, Trajectory


class HFEngine:
    """Samples with `model.generate` (KV cache, left padding) at a fixed temperature and no
    top-k/top-p truncation, so the behaviour distribution is exactly softmax(logits / T).

    In the synchronous loop the engine and the trainer share one model object, so
    `load_weights` only records the version; a remote engine would copy the tensors.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: WordTokenizer, sampling: SamplingConfig, max_batch: int = 128):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.max_batch = max_batch
        self.version = 0
        self.generation_config = GenerationConfig(
            do_sample=True,
            temperature=sampling.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=tokenizer.pad_id,
            eos_token_id=tokenizer.eos_id,
            bos_token_id=tokenizer.bos_id,
            return_dict_in_generate=True,
            output_logits=True,
        )

    def load_weights(self, state_dict: dict | None, version: int) -> None:
        if state_dict is not None:
            self.model.load_state_dict(state_dict)
        self.version = version

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int = 1) -> list[Trajectory]:
        """n samples per prompt, in prompt order (prompt 0's n samples first)."""
        expanded = [p for p in prompts for _ in range(n)]
        out: list[Trajectory] = []
        for i in range(0, len(expanded), self.max_batch):
            out += self._generate_batch(expanded[i : i + self.max_batch])
        return out

    def _generate_batch(self, prompts: list[str]) -> list[Trajectory]:
        tok = self.tokenizer
        encoded = [tok.prompt_ids(p) for p in prompts]
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(encoded), width), tok.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, ids in enumerate(encoded):  # left padding: generation continues at the right edge
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1

        was_training = self.model.training
        self.model.eval()
        result = self.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=self.generation_config)
        self.model.train(was_training)

        generated = result.sequences[:, width:]
        logits = torch.stack(result.logits, dim=1).float() / self.sampling.temperature
        logprobs = F.log_softmax(logits, dim=-1).gather(-1, generated[..., None]).squeeze(-1)

        trajectories = []
        for row, prompt in enumerate(prompts):
            ids = generated[row].tolist()
            # keep tokens up to and including the first <eos>; the policy learns when to stop
            length = ids.index(tok.eos_id) + 1 if tok.eos_id in ids else len(ids)
            action = Segment("action", ids[:length], logprobs[row, :length].tolist())
            trajectories.append(
                Trajectory(
                    prompt_tokens=encoded[row],
                    segments=[action],
                    prompt_text=prompt,
                    response_text=tok.decode(ids[:length]),
                    policy_version=self.version,
                )
            )
        return trajectories
