"""A custom rollout engine: the HF engine with its own validated arguments and a count of the
prompts it sampled. Name it in a scenario by import path, with this directory on PYTHONPATH:

    engine: {type: "custom_engine:CountingEngine", args: {max_batch: 16}}

An engine is built as `cls(policy, tokenizer, sampling, **args)`; its `Config` (optional) validates
`args` when the scenario loads. It must return Trajectories with the behaviour log-prob of every
sampled token (DIS and the importance ratios need them), and `load_weights(state | None, version)`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from testbed.engines.hf_engine import HFEngine


class CountingEngine(HFEngine):
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        max_batch: int = Field(128, ge=1, description="prompts per decoding batch")

    def __init__(self, model, tokenizer, sampling, **args):
        config = self.Config.model_validate(args)
        super().__init__(model, tokenizer, sampling, max_batch=config.max_batch)
        self.prompts_seen = 0

    def generate(self, prompts, n=1):
        self.prompts_seen += len(prompts) * n
        return super().generate(prompts, n)
