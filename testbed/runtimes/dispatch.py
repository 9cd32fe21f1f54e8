"""Which runtime runs an arm, and the Ray session a run needs: what the CLI and the parallel-arm
tasks share, so that neither imports the other."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario


def runner_for(scenario: Scenario, arm: Any) -> Any:
    """`run_arm` of the arm's runtime: the same arguments, the same rows."""
    from testbed.runtimes.loop import run_arm

    if scenario.runtime_for(arm).kind == "ray":
        from testbed.runtimes.ray.runtime import run_arm_ray  # imports ray only when asked for

        return run_arm_ray
    if scenario.runtime_for(arm).kind == "simulated":
        from testbed.runtimes.simulated.runner import run_arm_simulated

        return run_arm_simulated
    return run_arm


def runtime_session(scenario: Scenario) -> Any:
    """A Ray session when any arm needs Ray (parallel arms or the Ray runtime), else nothing."""
    if scenario.runtime.parallel_arms or any(scenario.runtime_for(arm).kind == "ray" for arm in scenario.arms):
        from testbed.runtimes.ray.cluster import ray_session

        return ray_session(scenario.runtime)
    return contextlib.nullcontext()


def arm_problems(scenario: Scenario) -> list[str]:
    """What an arm asks of its runtime that the runtime cannot give, each naming its field: a
    trainer whose Config asks for `baseline_samples` (the upper-bound baseline: extra judged samples
    per prompt, never trained on) needs the synchronous runtime, the one that draws them."""
    out = []
    for i, arm in enumerate(scenario.arms):
        config = getattr(arm.trainer_class(), "Config", None)
        try:
            samples = int(getattr(config.model_validate(arm.args), "baseline_samples", 0) or 0) if config else 0
        except Exception:  # a bad argument is the scenario loader's to report
            continue
        if samples and scenario.runtime_for(arm).kind != "sync":
            out.append(
                f"arms.{i}.args.baseline_samples ({arm.name}): the upper-bound baseline draws its samples in the "
                f"synchronous runtime only; this arm's runtime.kind is {scenario.runtime_for(arm).kind}"
            )
    return out


def resolved_dict(scenario: Scenario) -> dict[str, Any]:
    """The scenario with every default filled in, as plain data (what a Ray task is sent)."""
    return scenario.model_dump(mode="json", by_alias=True)
