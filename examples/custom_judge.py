"""A custom judge, plugged in by import path: no registration, no subclassing.

Scenario snippet (run from the repository root so that `examples` is importable; for your own
package use "mypkg.module:Name")::

    judge:
      type: "examples.custom_judge:LengthAwareJudge"
      args: {max_words: 30, strict_topic: true}

    # or a factory: a function that `args` are passed to and that returns the judge
    #   judge: {type: "examples.custom_judge:make_keyword_judge", args: {bonus_word: "coffee"}}

`testbed.judging.adapter.as_judge` accepts (see its docstring for the exact rules):
  * an object with `async def judge(requests) -> list[Verdict]` (the Judge protocol itself),
  * an object with a sync `judge(requests)`,
  * an object with `score(request)` (sync or async),
  * a callable `f(request)` (sync or async),
and each result may be a `Verdict`, a dict `{"quality": 0|1, "style": str, ...}` or a tuple
`(quality, style)`; `style_match` defaults to `style == request.target_style`. An exception raised
while scoring is an outage (a timeout, a connection error, HTTP 429/5xx: the episode is excluded and
counted, not scored 0) or a bug (anything else before the first verdict, or the same exception 8
calls in a row: the run stops with its traceback, exit 2). Async per-request judges run
concurrently, up to their `concurrency` attribute (default 32).

The judge below reuses the rubric's style reading and adds its own quality rule; run this file to
see it score a few generated pieces:

    python examples/custom_judge.py
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from judges.rubric import RubricJudge
from testbed.judging.adapter import as_judge
from testbed.types import JudgeRequest
from testbed.world import generate, prompts, render_prompt, split_words


class LengthAwareJudge:
    """Quality 1 only for pieces of at most `max_words` words that the rubric also passes;
    style as the rubric reads it. A sync `score` returning a dict: the adapter does the rest."""

    def __init__(self, max_words: int = 30, strict_topic: bool = True) -> None:
        self.max_words = max_words
        self.strict_topic = strict_topic
        self._rubric = RubricJudge()

    def score(self, req: JudgeRequest) -> dict:
        base = self._rubric.score(req)
        words = sum(tok.isalpha() for tok in split_words(req.response))
        short_enough = words <= self.max_words
        quality = int(short_enough and (base.quality == 1 or not self.strict_topic))
        return {"quality": quality, "style": base.style, "reason": f"{words} words; rubric: {base.raw}"}


def make_keyword_judge(bonus_word: str = "coffee"):
    """A factory returning an async function judge: quality 1 iff the piece mentions the word."""

    async def keyword_judge(req: JudgeRequest) -> tuple[int, str]:
        style = RubricJudge().score(req).style or "plain"
        return int(bonus_word in req.response.lower()), style

    return keyword_judge


async def _demo() -> None:
    rng = random.Random(0)
    spec = prompts("train")[0]
    reqs = [
        JudgeRequest(
            render_prompt(spec, ["cute", "academic"]),
            generate(style, spec.topic, rng),
            "cute",
            ("cute", "academic"),
            spec.topic,
        )
        for style in ("cute", "academic", "plain")
    ]
    for name, judge in (
        ("LengthAwareJudge", as_judge(LengthAwareJudge(max_words=30))),
        ("keyword_judge", as_judge(make_keyword_judge(spec.topic.split()[0]))),
    ):
        for req, v in zip(reqs, await judge.judge(reqs)):
            print(f"{name:>16}: reward={v.reward:.0f} quality={v.quality} style={v.style:<9} {req.response[:60]}...")


if __name__ == "__main__":
    asyncio.run(_demo())
