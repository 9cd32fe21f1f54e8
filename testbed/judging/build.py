"""The scenario's judges, built from their config: the training judge and the gold judge, each in
any shape `as_judge` accepts, with the world's rules applied (testbed/world/rules.py)."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from testbed import registry
from testbed.judging.adapter import JudgePluginError, as_judge
from testbed.judging.panel import JudgePanel
from testbed.protocols import DEFAULT_JUDGE
from testbed.scenario.schema import Scenario, ScenarioError, format_validation_error
from testbed.types import JudgeRequest
from testbed.world import generate, prompts, render_prompt
from testbed.world.rules import wrap

if TYPE_CHECKING:
    from testbed.protocols import Judge


def build_judge(scenario: Scenario) -> Judge:
    """The scenario's judge, in any shape `as_judge` accepts (async or sync, batch or single),
    with the world's hard and noisy topics applied (testbed/world/rules.py). With `judges:` (a
    schedule that changes the judge) a `JudgePanel` of them all, "default" the scenario's `judge`."""
    judge = wrap(judge_from_config(scenario.judge, "judge"), scenario.world.rules())
    if not scenario.judges:
        return judge
    members = {DEFAULT_JUDGE: judge}
    for name, config in scenario.judges.items():
        members[name] = wrap(judge_from_config(config, f"judges.{name}"), scenario.world.rules())
    return JudgePanel(members)


def build_gold_judge(scenario: Scenario) -> Judge | None:
    """The scenario's gold judge (scores episodes beside the training judge, never trains), with
    the world's hard topics but not its judge noise: the gold reward is the world's truth."""
    if scenario.gold_judge is None:
        return None
    return wrap(judge_from_config(scenario.gold_judge, "gold_judge"), scenario.world.rules(), noise=False)


def judge_from_config(config: Any, field: str) -> Judge:
    """The judge `config.type` names: a class or factory built with `args` (registry.build), or a
    ready-made judge; then `as_judge` gives it the Judge protocol."""
    try:
        factory = registry.import_path(config.path)
    except registry.RegistryError as exc:
        raise ScenarioError(f"{field}.type: {exc}") from None
    try:
        obj = registry.build(factory, config.args) if registry.is_factory(factory, config.args) else factory
    except (TypeError, ValueError) as exc:  # ValueError: a judge's pydantic config naming the field
        raise ScenarioError(f"{field} {config.path}: bad {field}.args {config.args}: {exc}") from None
    return as_judge(obj)


def check_judge(config: Any, field: str) -> str:
    """What a dry run does in place of `judge_from_config`: the same import, then the args checked
    by the judge's own pydantic `Config` without building it (a judge that declares one, the LLM
    judge, would start a local server and open its verdict cache); a judge without one is built
    as a run builds it at start-up, called once on a sample request (`probe`), then closed. Returns
    "checked" or "built; <the sample verdict>"; bad args, or a judge that fails as a bug would,
    raise a ScenarioError naming the field."""

    try:
        factory = registry.import_path(config.path)
    except registry.RegistryError as exc:
        raise ScenarioError(f"{field}.type: {exc}") from None
    schema = registry.config_of(factory)
    if schema is not None:
        try:
            schema.model_validate(config.args)
        except ValidationError as exc:
            body = format_validation_error(exc, schema, field).splitlines()[1:]
            raise ScenarioError(
                f"{field} {config.path}: bad {field}.args\n"
                + "\n".join(line.replace("  ", f"  {field}.args.", 1) for line in body)
            ) from None
        return "checked"
    judge = judge_from_config(config, field)
    try:
        outcome = probe(judge, f"{field} {config.path}")
    finally:
        closer = getattr(judge, "close", None)
        if callable(closer):
            closer()
    return f"built; {outcome}"


def probe(judge: Judge, who: str) -> str:
    """Call a built judge once on a sample request (a generated on-target piece), so that a broken
    judge shows in a dry run, before SFT. A bug raises a ScenarioError naming `who`; a failed
    verdict (an outage) is reported, not raised: the service may be down only now."""

    spec = prompts("train")[0]
    request = JudgeRequest(
        prompt=render_prompt(spec, ["cute", "academic"]),
        target_style="cute",
        topic=spec.topic,
        response=generate("cute", spec.topic, random.Random(0)),
        candidate_styles=("cute", "academic"),
    )
    try:
        verdicts = asyncio.run(judge.judge([request]))
    except JudgePluginError as exc:
        raise ScenarioError(f"{who}: the judge fails on a sample request: {exc}") from exc
    except Exception as exc:  # a shape-1 judge's own exception: the same bug a run would hit first
        raise ScenarioError(f"{who}: the judge raised {exc!r} on a sample request") from exc
    verdict = next(iter(verdicts))
    return f"sample verdict failed: {verdict.error}" if verdict.error else f"sample verdict reward {verdict.reward:g}"
