"""What RL starts from: each seed's SFT policy (trained or from the cache) and the acceptance check
that SFT must pass."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

    from testbed.config import Scenario
    from testbed.models.tokenizer import WordTokenizer


def sft_evaluator(scenario: Scenario):
    """The SFT acceptance check: sample on held-out prompts offering every archetype subset of
    size 3, judge with the embedded rubric, report style shares and quality."""
    from collections import Counter

    from testbed import registry
    from testbed.envs.schedules import Phase, PiecewiseSchedule
    from testbed.envs.style_shift import StyleShiftEnv
    from testbed.loop import make_engine
    from testbed.world import prompts

    rubric = registry.load("judge", "rubric")()
    archetypes = scenario.world.archetypes
    candidate_sets = [tuple(c for c in archetypes if c != left_out) for left_out in archetypes] if len(archetypes) > 3 else [tuple(archetypes)]

    def evaluate(model: torch.nn.Module, tokenizer: WordTokenizer) -> dict:
        engine = make_engine(scenario, model, tokenizer)
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


class StartingPolicy(NamedTuple):
    """The policy RL starts from (the SFT policy or a checkpoint), its tokenizer, cache key and report."""

    policy: Any
    tokenizer: Any
    key: str
    report: dict[str, Any]


def load_or_train_policy(*args: Any, **kwargs: Any) -> Any:
    """testbed.models.sft.load_or_train_policy, imported on first use."""
    from testbed.models.sft import load_or_train_policy as load

    return load(*args, **kwargs)


def starting_configs(scenario: Scenario) -> dict[int, Any]:
    """The policy config of each distinct starting policy, by the seed that first uses it: one
    (the first seed's) shared by every seed, or with `policy.sft.per_seed` one per seed, its SFT
    seed = sft.seed + the run's seed."""
    sft = scenario.policy.sft
    if sft.per_seed and not scenario.policy.checkpoint:
        return {seed: scenario.policy.model_copy(update={"sft": sft.model_copy(update={"seed": sft.seed + seed})})
                for seed in scenario.seeds}
    return {scenario.seeds[0]: scenario.policy}


def starting_policies(scenario: Scenario, log: Any = print, load: Any = None) -> dict[int, StartingPolicy]:
    """Each seed's starting policy: one SFT policy shared by every seed, or with
    `policy.sft.per_seed` one per seed (SFT seed = sft.seed + the run's seed, cached by seed, so
    the seeds' spread covers the starting policy too; seed 0's is the shared one). With parallel
    arms, the policies not yet in the cache are trained side by side as Ray tasks first."""
    load = load or load_or_train_policy  # `load(cfg, archetypes, evaluate=, log=, env=)`
    configs = starting_configs(scenario)
    per_seed = scenario.policy.sft.per_seed and not scenario.policy.checkpoint
    if per_seed and scenario.runtime.parallel_arms:
        from testbed.distributed.parallel import train_policies_in_parallel
        from testbed.arm_runtimes import runtime_session

        with runtime_session(scenario):
            train_policies_in_parallel(scenario, list(configs.values()), log=log)
    out: dict[int, StartingPolicy] = {}
    for seed, cfg in configs.items():
        if per_seed:
            log(f"seed {seed}: its own SFT policy (sft.seed {cfg.sft.seed})")
        policy, tokenizer, report = load(cfg, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=log,
                                         env=scenario.env)
        out[seed] = StartingPolicy(policy, tokenizer, report.get("key") or report.get("checkpoint", ""), report)
    return {seed: out[seed] if seed in out else next(iter(out.values())) for seed in scenario.seeds}
