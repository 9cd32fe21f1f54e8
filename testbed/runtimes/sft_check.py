"""The SFT acceptance check: what a freshly trained (or cached) policy must show before RL starts
from it, here and in the Ray tasks that train policies side by side."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from testbed import registry
from testbed.envs.schedules import Phase, PiecewiseSchedule
from testbed.envs.style_shift import StyleShiftEnv
from testbed.world import prompts

if TYPE_CHECKING:
    import torch

    from testbed.models.tokenizer import WordTokenizer
    from testbed.scenario.schema import Scenario


def sft_evaluator(scenario: Scenario):
    """The SFT acceptance check: sample on held-out prompts offering every archetype subset of
    size 3, judge with the embedded rubric, report style shares and quality."""
    from testbed.runtimes.runner import make_engine  # it loads torch

    rubric = registry.load("judge", "rubric")()
    archetypes = scenario.world.archetypes
    candidate_sets = (
        [tuple(c for c in archetypes if c != left_out) for left_out in archetypes]
        if len(archetypes) > 3
        else [tuple(archetypes)]
    )

    # The run's generator, whatever the scenario's sampling.streams: the check decides whether SFT
    # trains another round, so the policy (cached without the sampling settings) must not depend on them.
    batch_streams = scenario.model_copy(update={"sampling": scenario.sampling.model_copy(update={"streams": "batch"})})

    def evaluate(model: torch.nn.Module, tokenizer: WordTokenizer) -> dict:
        engine = make_engine(batch_streams, model, tokenizer)
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
        return {
            "quality": quality / n,
            "style_shares": {k: round(c / n, 3) for k, c in styles.most_common()},
            "samples": n,
        }

    return evaluate
