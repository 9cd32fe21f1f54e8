"""Names -> import paths for every pluggable part, loaded on use.

Built-ins are named exactly like a user's plugin ("package.module:Name"), so the core never
imports `judges/` or `trainers/` statically and a custom judge takes the same road as the rubric.
Packages may also register names through entry points (groups "testbed.judges", ...).
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points
from typing import Any

BUILTINS: dict[str, dict[str, str]] = {
    "judge": {
        "rubric": "judges.rubric:RubricJudge",  # args.mode: world (default) | open
        "open_world": "judges.open_world.judge:OpenWorldJudge",  # the rubric's open mode under its own name
        "llm": "judges.llm:LLMJudge",
        "smollm": "judges.smollm:SmolLMJudge",  # optional extra: pip install -e '.[smollm]'
    },
    "trainer": {
        "running_mean": "trainers.running_mean:RunningMeanTrainer",
        "sao": "trainers.sao:SAOTrainer",
        "grpo": "trainers.grpo:GRPOTrainer",
    },
    "schedule": {
        # factories: the args (positions in fractions of the budget) -> the schedule object
        "piecewise": "testbed.envs.schedules.piecewise:piecewise",
        "gradual": "testbed.envs.schedules.piecewise:gradual",
        "periodic": "testbed.envs.schedules.periodic:periodic",
        "random": "testbed.envs.schedules.random_switches:random_switches",
        # any of these for the target, and the judge changing too (a template upgrade, a rising bar, a blend)
        "judge_drift": "testbed.envs.schedules.judge_drift:judge_drift",
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


@functools.cache
def registered(kind: str) -> tuple[tuple[str, str], ...]:
    """(name, import path) of the installed packages' entry points for `kind`. Read once per
    process: the scan reads every installed distribution's metadata (about 0.1 s with this
    project's dependencies) and a scenario resolves a name for each of its plugins and arms."""
    return tuple((ep.name, ep.value) for ep in entry_points(group=f"testbed.{kind}s"))


def known(kind: str) -> dict[str, str]:
    """Built-in names plus those registered by installed packages' entry points."""
    names = dict(BUILTINS[kind])
    for name, value in registered(kind):
        names.setdefault(name, value)
    return names


def import_path(path: str) -> Any:
    """Load "package.module:Name" (or "package.module.Name") with errors that say what failed."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    # every dotted part a Python name: importlib takes ".x" as a relative import (a TypeError without
    # a package) and "a b" as a module to look for; neither is a plugin path
    parts = [*module_name.split("."), *attr.split(".")]
    if not module_name or not attr or not all(part.isidentifier() for part in parts):
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
    raise RegistryError(
        f"unknown {kind} '{name}' (known: {', '.join(sorted(names))}; or give an import path 'package.module:Name')"
    )


def load(kind: str, name: str) -> Any:
    return import_path(resolve(kind, name))


# ----------------------------------------------------------------------------------------------
# One construction contract for every kind. A scenario section names the plugin by `type:` and
# gives its settings in `args:`. What `type` names is a class or a factory function; either is
# called as `obj(*inputs, **keywords, **args)`, where the inputs and keywords are what the loop
# hands every plugin of that kind (INPUTS). `args` are checked when the scenario loads: by the
# object's pydantic `Config` when it has one, else against the keyword parameters of its signature.

# kind -> (positional inputs, keyword inputs): the names a plugin's signature starts with
INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "judge": ((), ()),
    "schedule": ((), ("budget", "archetypes")),
    "trainer": (("policy",), ("pad_id", "temperature", "seed")),
    "engine": (("policy", "tokenizer", "sampling"), ()),
    "env": (("judge", "schedule", "prompt_specs"), ("seed", "candidate_change_share")),
}


def configured(config: type) -> Any:
    """Give a factory function the pydantic `Config` its `args` are checked by:
    `@configured(MyConfig)` above `def make(**args)` (a class says `Config = MyConfig` instead)."""

    def mark(factory: Any) -> Any:
        factory.Config = config
        return factory

    return mark


def config_of(obj: Any) -> Any:
    """The pydantic model that checks a plugin's `args` (its `Config` attribute), or None."""
    from pydantic import BaseModel

    config = getattr(obj, "Config", None)
    return config if isinstance(config, type) and issubclass(config, BaseModel) else None


def check_args(kind: str, obj: Any, args: dict[str, Any], context: dict[str, Any] | None = None) -> Any:
    """Check `args` for the plugin `obj` of `kind`; returns its validated Config (None without one).
    A pydantic ValidationError escapes for the caller to name the field; a key that the
    signature does not take (or a required one missing) is a ValueError naming the key."""
    positional, keywords = INPUTS[kind]
    reserved = sorted(set(args) & set(keywords))
    if reserved:  # the call would get it twice
        raise ValueError(f"args.{reserved[0]}: given by the loop to every {kind}, not an arg")
    config = config_of(obj)
    if config is not None:
        return config.model_validate(args, context=context)
    if not callable(obj):
        if args:
            raise ValueError(
                f"args: {type(obj).__name__} is a ready-made object, not a class or factory: it takes no args "
                f"(got {sorted(args)})"
            )
        return None
    params = _parameters(obj)
    if params is None:  # a builtin without a signature: its own error will do
        return None
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    plain = [p for p in named if p.kind is p.POSITIONAL_OR_KEYWORD]
    own = [p for p in named if p not in plain[: len(positional)] and p.name not in keywords]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        unknown = sorted(set(args) - {p.name for p in own})
        if unknown:
            takes = ", ".join(p.name for p in own) or "none"
            raise ValueError(f"args.{unknown[0]}: not an argument of {_name(obj)} (it takes: {takes})")
    missing = [p.name for p in own if p.default is p.empty and p.name not in args]
    if missing:
        raise ValueError(f"args.{missing[0]}: required by {_name(obj)}, missing")
    return None


def is_factory(obj: Any, args: dict[str, Any]) -> bool:
    """Whether a judge's `type` names what builds the judge (called with `args`) or the judge
    itself: a class, any callable given `args`, or one that needs no argument, is a factory; a
    function of one request given no `args` is a ready-made per-request judge."""
    if isinstance(obj, type) or args:
        return True
    if not callable(obj):
        return False
    params = _parameters(obj)
    if params is None:  # a builtin without a signature: treat it as the judge
        return False
    return not [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _parameters(obj: Any) -> list[Any] | None:
    import inspect

    try:
        return list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__


def build(obj: Any, args: dict[str, Any], *inputs: Any, **keywords: Any) -> Any:
    """A plugin object: `obj(*inputs, **keywords, **args)` (see INPUTS for what each kind gets)."""
    return obj(*inputs, **keywords, **args)
