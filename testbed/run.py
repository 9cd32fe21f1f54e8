"""python -m testbed.run SCENARIO.yaml [--out DIR] [--set key=value ...]

Wires a scenario together: loads the judge, schedule and trainers by name through the registry,
prepares the SFT policy (cached), runs every arm x seed through the loop into one run directory,
and prints the reward before and after each switch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from testbed import registry
from testbed.config import Scenario, ScenarioError, load_scenario
from testbed.envs.schedules import (
    GradualSchedule,
    PeriodicSchedule,
    Phase,
    PiecewiseSchedule,
    RandomSchedule,
    load_schedule,
)
from testbed.envs.style_shift import StyleShiftEnv
from testbed.judge_adapter import as_judge
from testbed.loop import make_progress, run_arm
from testbed.models.sft import load_or_train_policy
from testbed.models.tokenizer import WordTokenizer
from testbed.protocols import DriftSchedule, Judge
from testbed.rollout.hf_engine import HFEngine
from testbed.store import RunStore, base_manifest
from testbed.world import prompts

console = Console(stderr=True)


def build_schedule(scenario: Scenario) -> DriftSchedule:
    """Scenario fractions of the budget -> a schedule in clock units (judged episodes)."""
    s, budget, default = scenario.schedule, scenario.budget.episodes, tuple(scenario.world.archetypes)

    def at(fraction: float) -> int:
        return round(fraction * budget)

    if s.kind in ("piecewise", "gradual"):
        phases = [Phase(p.style, at(p.start), at(p.end), tuple(p.candidates or default)) for p in s.phases]
        if s.kind == "piecewise":
            return PiecewiseSchedule(phases)
        return GradualSchedule(phases, window=max(1, at(s.window)), seed=s.seed)
    if s.kind == "periodic":
        return PeriodicSchedule(s.styles, period=max(1, at(s.period)), candidates=s.candidates, horizon=budget)
    if s.kind == "random":
        return RandomSchedule(s.styles, mean_phase=max(1, at(s.mean_phase)), min_phase=max(1, at(s.min_phase)),
                              horizon=budget, seed=s.seed, candidates=s.candidates)
    return load_schedule(s.class_, **s.args)


def build_judge(scenario: Scenario) -> Judge:
    """The scenario's judge, in any shape `as_judge` accepts (async or sync, batch or single)."""
    factory = registry.import_path(scenario.judge.path)
    try:
        obj = factory(**scenario.judge.args) if isinstance(factory, type) else factory
    except TypeError as exc:
        raise ScenarioError(f"judge {scenario.judge.path}: bad judge.args {scenario.judge.args}: {exc}") from None
    return as_judge(obj)


def sft_evaluator(scenario: Scenario):
    """The SFT acceptance check: sample on held-out prompts offering every archetype subset of
    size 3, judge with the embedded rubric, report style shares and quality."""
    rubric = registry.load("judge", "rubric")()
    archetypes = scenario.world.archetypes
    candidate_sets = [tuple(c for c in archetypes if c != left_out) for left_out in archetypes] if len(archetypes) > 3 else [tuple(archetypes)]

    def evaluate(model: torch.nn.Module, tokenizer: WordTokenizer) -> dict:
        engine = HFEngine(model, tokenizer, scenario.sampling)
        specs = prompts("heldout")
        styles: Counter = Counter()
        quality = n = 0
        per_set = max(1, scenario.policy.sft.eval_samples // len(candidate_sets))
        for cands in candidate_sets:
            schedule = PiecewiseSchedule([Phase(cands[0], 0, 1, cands)])
            env = StyleShiftEnv(rubric, schedule, specs)
            chosen = [specs[i % len(specs)] for i in range(per_set)]
            starts = env.eval_starts(chosen, 0)
            trajs = engine.generate([s.prompt_text for s in starts])
            verdicts = env.evaluate_batch(starts, [t.response_text for t in trajs])
            for v in verdicts:
                styles[v.style] += 1
                quality += v.quality
                n += 1
        return {"quality": quality / n, "style_shares": {k: round(c / n, 3) for k, c in styles.most_common()}, "samples": n}

    return evaluate


def resolved_dict(scenario: Scenario) -> dict[str, Any]:
    return scenario.model_dump(mode="json", by_alias=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.run", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument("--out", help="parent directory for the run directory (default: the scenario's output.dir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario field, e.g. --set budget.episodes=500 (repeatable)")
    args = parser.parse_args(argv)

    try:
        scenario = load_scenario(args.scenario, args.overrides)
        judge = build_judge(scenario)
        schedule = build_schedule(scenario)
    except (ScenarioError, registry.RegistryError, ValueError, TypeError) as exc:
        console.print(f"[red]error:[/] {exc}", markup=True, highlight=False)
        return 2

    out_dir = Path(args.out or scenario.output.dir)
    try:
        store = RunStore.create(out_dir, scenario.name, scenario.output.flush_rows, scenario.output.flush_seconds)
    except OSError as exc:
        console.print(f"[red]error:[/] cannot write the run directory under {out_dir}: {exc}")
        return 2
    store.write_scenario(resolved_dict(scenario))
    manifest = base_manifest(scenario.name, scenario.seeds, scenario.digest())
    manifest["switch_points"] = list(schedule.switch_points())
    manifest["budget"] = scenario.budget.episodes
    store.write_manifest(manifest)
    console.print(f"run directory: {store.root}")

    torch.set_num_threads(max(1, torch.get_num_threads()))
    base_policy, tokenizer, sft_report = load_or_train_policy(
        scenario.policy, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=console.print
    )
    manifest["sft"] = sft_report
    store.write_manifest(manifest)

    started = time.time()
    try:
        with make_progress() as progress:
            for arm in scenario.arms:
                for seed in scenario.seeds:
                    totals = run_arm(scenario, arm, seed, base_policy=base_policy, tokenizer=tokenizer, judge=judge,
                                     schedule=schedule, store=store, progress=progress, log=progress.console.print,
                                     policy_key=sft_report.get("key") or sft_report.get("checkpoint", ""))
                    manifest["arms"].setdefault(arm.name, {})[str(seed)] = totals
                    store.write_manifest(manifest)
    except KeyboardInterrupt:
        store.flush()
        manifest["status"] = "interrupted"
        store.write_manifest(manifest)
        console.print(f"interrupted; rows so far are in {store.root}")
        return 130
    except Exception:
        store.flush()
        manifest["status"] = "failed"
        store.write_manifest(manifest)
        raise
    finally:
        close = getattr(judge, "close", None)
        if callable(close):  # e.g. an LLM judge stops the local server it started
            close()
    manifest["status"] = "done"
    manifest["wall_s"] = round(time.time() - started, 1)
    store.write_manifest(manifest)

    from analysis.report import report  # the one place the core calls analysis

    report([store.root], console=console)
    print(store.root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
