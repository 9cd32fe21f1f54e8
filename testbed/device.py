"""Where the models and batches live: `runtime.device` ("cpu", "cuda", "cuda:N" or "auto")
resolved to a torch device, and the check a run makes before it starts.

Only the policy copy an arm trains (and what is copied from it: the KL reference, SAO's critic)
and the batches move; the SFT policy, checkpoints on disk and weights sent between Ray processes
stay on the CPU, so a run saved on one device resumes on another.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def resolve(spec: str) -> torch.device:
    """ "auto" is CUDA where torch sees it, else the CPU; the others as written."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def for_this_process(spec: str) -> torch.device:
    """The device in this process. Inside a Ray actor or task, Ray shows only the GPU(s) it
    reserved for it (`runtime.actor_gpus`, `task_gpus`), so the driver's "cuda:N" is its "cuda"."""
    device = resolve(spec)
    return torch.device("cuda") if device.type == "cuda" and _in_ray_worker() else device


def _in_ray_worker() -> bool:
    if "ray" not in sys.modules:  # never imports ray for the sync runtime
        return False
    import ray  # already loaded (checked above): no start-up cost

    return ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


def problem(spec: str, where: str = "runtime.device") -> str | None:
    """Why `spec` cannot be used on this machine, or None."""
    device = resolve(spec)
    if device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return f"{where} is '{spec}' but torch sees no CUDA device here; use runtime.device: cpu (or auto)"
    if device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        return f"{where} is '{spec}' but torch sees {count} CUDA device(s) (0..{count - 1})"
    return None


def scenario_problems(scenario: Any) -> list[str]:
    """What about `runtime.device` this machine, or Ray, cannot give: each named by its field."""
    out: list[str] = []
    for i, arm in enumerate(scenario.arms):
        rt, prefix = scenario.runtime_for(arm), ("runtime" if "device" not in arm.runtime else f"arms.{i}.runtime")
        found = problem(rt.device, f"{prefix}.device")
        if found is None and rt.kind == "ray" and resolve(rt.device).type == "cuda" and gpus(rt, "actor") == 0:
            found = (
                f"runtime.actor_gpus is 0 but {prefix}.device is '{rt.device}': Ray hides the GPUs from an actor that "
                "reserved none; give it a share (e.g. 0.25)"
            )
        if found and found not in out:
            out.append(found)
    rt = scenario.runtime
    if not out and rt.parallel_arms and resolve(rt.device).type == "cuda" and gpus(rt, "task") == 0:
        out.append(
            f"runtime.task_gpus is 0 but runtime.device is '{rt.device}': Ray hides the GPUs from a task that "
            "reserved none; give it a share (e.g. 0.25)"
        )
    return out


def gpus(runtime: Any, kind: str) -> float:
    """The GPUs Ray reserves for one process of `kind` ("actor": a rollout actor or a learner;
    "task": a parallel arm x seed): `runtime.actor_gpus` / `task_gpus` as set, else one per
    process on CUDA and none on the CPU."""
    set_ = runtime.actor_gpus if kind == "actor" else runtime.task_gpus
    if set_ is not None:
        return set_
    return 1.0 if resolve(runtime.device).type == "cuda" else 0.0


def to_cpu(value: Any) -> Any:
    """A nested state (dicts, lists, tuples of tensors and plain values) with every tensor on the
    CPU: what travels between Ray processes and what the driver keeps, whatever the learner's device."""
    if torch.is_tensor(value):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def of(module: torch.nn.Module) -> torch.device:
    """The device of a module's parameters (the CPU for one without any)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))
