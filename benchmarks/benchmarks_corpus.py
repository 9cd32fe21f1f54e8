"""A labelled corpus of judge requests for the judge benchmarks: generated pieces in every style
(about one in five corrupted), rendered prompts with random candidate lists and targets."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.types import JudgeRequest
from testbed.world import CORRUPTIONS, STYLES, corrupt, generate, prompts, render_prompt

ARCHETYPES = ["academic", "cute", "chuunibyou", "classical"]


def make_labelled(n: int, seed: int = 0) -> list[tuple[str, bool, JudgeRequest]]:
    """(true style, well-formed?, request) triples."""
    rng = random.Random(seed)
    specs = prompts("train") + prompts("heldout")
    out = []
    for i in range(n):
        spec = rng.choice(specs)
        style = STYLES[i % len(STYLES)]
        cands = tuple(rng.sample(ARCHETYPES, 3))
        text = generate(style, spec.topic, rng)
        good = rng.random() >= 0.2
        if not good:
            text = corrupt(text, rng.choice(CORRUPTIONS), rng, style=style, topic=spec.topic)
        out.append((style, good, JudgeRequest(render_prompt(spec, cands), text, rng.choice(cands), cands, spec.topic)))
    return out


def make_requests(n: int, seed: int = 0) -> list[JudgeRequest]:
    return [r for _, _, r in make_labelled(n, seed)]
