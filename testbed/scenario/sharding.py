"""The learner's distributed settings (`runtime.learner_strategy`, `runtime.fsdp`,
`runtime.micro_batch_tokens`): how `learner_workers` ranks hold and train the models
(testbed/runtimes/learner_strategy.py applies them; docs/distributed.md explains them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from testbed.scenario.plugins import Strict

LearnerStrategy = Literal["replicate", "fsdp"]


class FSDPConfig(Strict):
    """FSDP2 (`fully_shard` per decoder layer) for the policy, the critic and the KL reference."""

    param_dtype: Literal["bfloat16", "float16", "float32"] | None = Field(
        default="bfloat16",
        description="dtype the layers compute in (MixedPrecisionPolicy); null: the model's own",
    )
    reduce_dtype: Literal["bfloat16", "float32"] | None = Field(
        default="float32", description="dtype of the gradient reduce-scatter; null: param_dtype"
    )
    offload: bool = Field(default=False, description="keep parameters, gradients and optimiser state on the CPU")
    activation_checkpointing: bool = Field(
        default=False, description="recompute each decoder layer's activations in backward instead of keeping them"
    )
    publish_bucket_mb: float | None = Field(
        default=512.0,
        gt=0,
        description="gather the published policy in buckets of about this many MB (null: all parameters at once)",
    )

    def bucket_bytes(self) -> int | None:
        return None if self.publish_bucket_mb is None else int(self.publish_bucket_mb * 2**20)
