"""What the Ray runtime's driver and learners know of the arm's trainer: ``TrainerFactory`` builds
it inside a learner worker, ``LearnerProxy`` stands for it in the driver's loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from testbed import registry
from testbed.cpu_numerics import configure_torch
from testbed.device import for_this_process
from testbed.engines.mismatch import MismatchProbe, trainer_band
from testbed.models import lora
from testbed.runtimes import learner_strategy
from testbed.runtimes.ray.learner import LearnerGroup
from testbed.runtimes.ray.rollout import build_policy
from testbed.scenario.lora import LoraSettings
from testbed.scenario.schema import ArmConfig

__all__ = ["LearnerProxy", "TrainerFactory"]


@dataclasses.dataclass
class TrainerFactory:
    """Builds the arm's trainer inside a learner worker from the policy's config and weights, so
    a worker on another node needs no cache directory."""

    arm: ArmConfig
    policy_config: Any
    policy_state: dict
    pad_id: int
    temperature: float
    seed: int
    threads: int
    mismatch: bool = False  # engine.mismatch: the learner measures it (testbed/engines/mismatch.py)
    device: str = "cpu"  # runtime.device: where the learner places the policy (and so its reference and critic)
    micro_batch_tokens: int | None = None  # runtime.micro_batch_tokens
    lora: LoraSettings | None = None  # policy.lora: the learner trains adapters and publishes merged weights

    def probe(self, trainer: Any) -> Any:
        """The learner's mismatch probe on the trainer's policy, or None when it is off."""
        if not self.mismatch:
            return None
        return MismatchProbe(trainer.policy, self.pad_id, self.temperature, trainer_band(trainer))

    def __call__(self) -> Any:
        configure_torch(self.threads)  # Ray sets OMP_NUM_THREADS=1 in its workers
        policy = lora.attach(
            build_policy(self.policy_config, self.policy_state, for_this_process(self.device)), self.lora, self.seed
        )
        trainer = registry.build(
            self.arm.trainer_class(),
            self.arm.args,
            policy,
            pad_id=self.pad_id,
            temperature=self.temperature,
            seed=self.seed,
        )
        return learner_strategy.micro_batching(trainer, self.micro_batch_tokens)


class LearnerProxy:
    """What the shared loop sees of the trainer: static properties from a local shadow trainer
    (built the same way, used for the warm-up), state and version from the remote learner."""

    def __init__(self, shadow: Any, learner: LearnerGroup):
        self.shadow, self.learner = shadow, learner
        self.group_size, self.episodes_per_update = shadow.group_size, shadow.episodes_per_update
        self.warmup_samples = getattr(shadow, "warmup_samples", 0)
        self.version = 0
        self.sharded_to: Path | None = None  # where the next state goes in shards (RayRunner.save_checkpoint)

    def __getattr__(self, name: str) -> Any:  # warmup, warmup_key, warmup_state on the shadow
        return getattr(self.shadow, name)

    def load_warmup_state(self, state: dict) -> None:
        self.shadow.load_warmup_state(state)

    def state_dict(self) -> dict:
        if self.sharded_to is not None:
            return self.learner.save_sharded(self.sharded_to)
        return self.learner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state)
        self.version = state["version"]
