"""Names -> import paths for every pluggable part, loaded on use.

Built-ins are named exactly like a user's plugin ("package.module:Name"), so the core never
imports `judges/` or `trainers/` statically and a custom judge takes the same road as the rubric.
Packages may also register names through entry points (groups "testbed.judges", ...).
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

BUILTINS: dict[str, dict[str, str]] = {
    "judge": {
        "rubric": "judges.rubric:RubricJudge",  # args.mode: world (default) | open
        "open_world": "judges.open_world:OpenWorldJudge",  # the rubric's open mode under its own name
        "llm": "judges.llm:LLMJudge",
        "smollm": "judges.smollm:SmolLMJudge",  # optional extra: pip install -e '.[smollm]'
    },
    "trainer": {
        "running_mean": "trainers.running_mean:RunningMeanTrainer",
        "sao": "trainers.sao:SAOTrainer",
        "grpo": "trainers.grpo:GRPOTrainer",
    },
    "schedule": {
        "piecewise": "testbed.envs.schedules:PiecewiseSchedule",
        "gradual": "testbed.envs.schedules:GradualSchedule",
        "periodic": "testbed.envs.schedules:PeriodicSchedule",
        "random": "testbed.envs.schedules:RandomSchedule",
    },
    "engine": {
        "hf": "testbed.engines.hf_engine:HFEngine",
        "vllm": "testbed.engines.vllm_engine:VLLMEngine",  # optional extra: make vllm (docs/vllm.md)
    },
    "env": {
        "style_shift": "testbed.envs.style_shift:StyleShiftEnv",
        "revision": "testbed.envs.revision:RevisionEnv",
    },
}


class RegistryError(ValueError):
    pass


def known(kind: str) -> dict[str, str]:
    """Built-in names plus those registered by installed packages' entry points."""
    names = dict(BUILTINS[kind])
    for ep in entry_points(group=f"testbed.{kind}s"):
        names.setdefault(ep.name, ep.value)
    return names


def import_path(path: str) -> Any:
    """Load "package.module:Name" (or "package.module.Name") with errors that say what failed."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise RegistryError(f"'{path}' is not an import path of the form 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"cannot import module '{module_name}' (from '{path}'): {exc}") from exc
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise RegistryError(f"module '{module_name}' has no attribute '{attr}' (from '{path}')") from None
    return obj


def resolve(kind: str, name: str) -> str:
    """A registered name -> its import path; an import path is returned as it is."""
    names = known(kind)
    if name in names:
        return names[name]
    if ":" in name:
        return name
    raise RegistryError(f"unknown {kind} '{name}' (known: {', '.join(sorted(names))}; or give an import path 'package.module:Name')")


def load(kind: str, name: str) -> Any:
    return import_path(resolve(kind, name))
