"""`runtime.simulation`: the cluster that `runtime.kind: simulated` models (testbed/runtimes/simulated).

Every setting is a time in simulated seconds, or a shape of its randomness. What each one models:

- `rollout_slots`: episodes in flight at once (an inference fleet's concurrent sequences);
- `latency`: one episode's generation time, linear in its response tokens and turns (decode time
  per token, prefill and scheduling per turn), times a random factor (log-normal with median 1 and
  `spread`, or exponential with mean 1), rare stragglers, plus the judge's own latency;
- `learner`: the time of one update, linear in its batch's tokens, times a random factor
  (log-normal, median 1, `spread`; its own random stream), plus the weight sync that publishes
  the new version to the rollouts (the learner is busy for both);
- `issue_size`: episodes that start together and are queued together (a rollout actor's static
  batch, as on the Ray runtime, generated as one: its members share one random latency factor and
  judge latency); unset, one group: continuous batching, one episode per slot, each its own draw;
- `staleness_policy`: `drop` starts a rollout whenever a slot is free and drops, at dequeue, an
  episode more than `runtime.max_staleness` versions old (its prompt is issued again); `pace`
  starts none while the updates due before it would train exceed the bound (AReaL's gate) and
  drops only what completion order still makes too stale;
- `evaluation`: `aside` evaluates the published version while everything runs on (an evaluator of
  its own); `drain` is the Ray runtime's loop: an evaluation waits for the update in progress and
  trains the next whole queued batch first, starting no episode and judging none meanwhile.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from testbed.scenario.plugins import Strict


class LatencyConfig(Strict):
    per_token_s: float = Field(default=0.02, ge=0, description="generation seconds per response token (decode)")
    per_turn_s: float = Field(default=0.5, ge=0, description="generation seconds per turn (prefill, scheduling)")
    distribution: Literal["lognormal", "exponential"] = Field(
        default="lognormal",
        description="the random factor on generation time: log-normal (median 1) or exponential (mean 1)",
    )
    spread: float = Field(default=0.0, ge=0, description="sigma of the log-normal factor (0: none)")
    straggler_share: float = Field(default=0.0, ge=0, le=1, description="share of episodes that straggle")
    straggler_factor: float = Field(
        default=10.0, ge=1, description="how many times longer a straggler's generation takes"
    )
    judge_s: float = Field(default=0.2, ge=0, description="the judge's latency per episode (median)")
    judge_spread: float = Field(default=0.0, ge=0, description="sigma of the judge latency's log-normal factor")


class LearnerTimeConfig(Strict):
    fixed_s: float = Field(default=1.0, ge=0, description="seconds per update whatever its size")
    per_token_s: float = Field(default=0.0005, ge=0, description="seconds per token of the batch (prompt and response)")
    sync_s: float = Field(default=1.0, ge=0, description="seconds to publish the new weights to the rollouts")
    spread: float = Field(
        default=0.0, ge=0, description="sigma of a log-normal factor (median 1) on each update's time before the sync"
    )


class SimulationConfig(Strict):
    rollout_slots: int = Field(default=256, ge=1, description="episodes in flight at once")
    latency: LatencyConfig = Field(default_factory=lambda: LatencyConfig())
    learner: LearnerTimeConfig = Field(default_factory=lambda: LearnerTimeConfig())
    issue_size: int | None = Field(
        default=None,
        ge=1,
        description="episodes started together and queued together when the last completes (a Ray rollout "
        "actor's round: set it to episodes_per_update); default one group (one episode for single rollouts)",
    )
    staleness_policy: Literal["drop", "pace"] = Field(
        default="drop", description="drop: start whenever a slot is free, drop the too stale; pace: gate the starts"
    )
    evaluation: Literal["aside", "drain"] = Field(
        default="aside",
        description="aside: held-out evaluations read the published version and nothing waits; drain: as the Ray "
        "runtime, an evaluation first finishes the update in progress and the next whole queued batch (no starts, "
        "no judging meanwhile), so it reads the newest version",
    )
