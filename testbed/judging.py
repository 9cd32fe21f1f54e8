"""The scenario's judges, built from their config: the training judge and the gold judge, each in
any shape `as_judge` accepts, with the world's rules applied (testbed/world_rules.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.config import Scenario
    from testbed.protocols import Judge


def build_judge(scenario: Scenario) -> Judge:
    """The scenario's judge, in any shape `as_judge` accepts (async or sync, batch or single),
    with the world's hard and noisy topics applied (testbed/world_rules.py)."""
    from testbed.world_rules import wrap

    return wrap(judge_from_config(scenario.judge, "judge"), scenario.world.rules())


def build_gold_judge(scenario: Scenario) -> Judge | None:
    """The scenario's gold judge (scores episodes beside the training judge, never trains), with
    the world's hard topics but not its judge noise: the gold reward is the world's truth."""
    from testbed.world_rules import wrap

    if scenario.gold_judge is None:
        return None
    return wrap(judge_from_config(scenario.gold_judge, "gold_judge"), scenario.world.rules(), noise=False)


def judge_from_config(config: Any, field: str) -> Judge:
    from testbed import registry
    from testbed.config import ScenarioError
    from testbed.judge_adapter import as_judge

    try:
        factory = registry.import_path(config.path)
    except registry.RegistryError as exc:
        raise ScenarioError(f"{field}.{'class' if config.class_ else 'name'}: {exc}") from None
    try:
        obj = factory(**config.args) if isinstance(factory, type) else factory
    except (TypeError, ValueError) as exc:  # ValueError: a judge's pydantic config naming the field
        raise ScenarioError(f"{field} {config.path}: bad {field}.args {config.args}: {exc}") from None
    return as_judge(obj)


def check_judge(config: Any, field: str) -> str:
    """What a dry run does in place of `judge_from_config`: the same import, then the args checked
    by the judge's own pydantic `Config` without building it (a judge that declares one, the LLM
    judge, would start a local server and open its verdict cache); a judge without one is built
    as a run builds it at start-up, then closed. Returns "checked" or "built"; bad args raise a
    ScenarioError naming the field."""
    from pydantic import BaseModel, ValidationError

    from testbed import registry
    from testbed.config import ScenarioError, format_validation_error

    try:
        factory = registry.import_path(config.path)
    except registry.RegistryError as exc:
        raise ScenarioError(f"{field}.{'class' if config.class_ else 'name'}: {exc}") from None
    schema = getattr(factory, "Config", None)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(config.args)
        except ValidationError as exc:
            body = format_validation_error(exc, schema, field).splitlines()[1:]
            raise ScenarioError(f"{field} {config.path}: bad {field}.args\n" + "\n".join(
                line.replace("  ", f"  {field}.args.", 1) for line in body)) from None
        return "checked"
    closer = getattr(judge_from_config(config, field), "close", None)
    if callable(closer):
        closer()
    return "built"
