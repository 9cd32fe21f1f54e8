"""World settings that change what a baseline can know (all off by default).

In the default world every topic is equally easy, so before the style-deciding tokens the chance
of success hardly depends on the prompt, and a state-dependent baseline (SAO's critic) has little
to learn that the global mean of recent rewards (the running mean) does not already know. These
settings make the prompt matter, each in one way:

  hard_topics           a fixed share of topics demand more to pass quality: at least
                        `min_words` words and `min_topic_words` of the topic's own nouns. The
                        expected reward then depends on the prompt (it names the topic).
  noisy_topics          on a fixed share of topics the judge's quality and style verdicts are each
                        flipped with probability `rate`: reward noise whose size depends on the
                        prompt (a judge that is unreliable on some subjects).
  candidate_change_share  the share of prompt forms whose candidate list changes when the
                        schedule changes it; the others keep showing the list of the schedule's
                        first target all run long, so for them the prompt gives no sign of a switch
                        (and may not list the style the reward now wants).

Which topics (or prompt forms) a share picks is a fixed function of its name (a hash), the same
in every run and seed, and a share of 0.5 picks exactly half (rounded). The judge-side settings
wrap any judge (`WorldRulesJudge`), so they hold for the rubric and an LLM judge alike; the
candidate lists are the env's (`shows_schedule_candidates`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from testbed.types import JudgeRequest, Verdict
from testbed.world.language import count_words, split_words
from testbed.world.prompts import prompts, topic_of_prompt
from testbed.world.topics import TOPICS, topic_keywords

__all__ = ["HardTopics", "NoisyTopics", "WorldRules", "WorldRulesJudge", "chosen", "shows_schedule_candidates"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class HardTopics(_Strict):
    share: float = Field(default=0.0, ge=0, le=1, description="share of topics that are hard (0: none)")
    min_words: int = Field(default=0, ge=0, description="words a piece on a hard topic needs to pass quality")
    min_topic_words: int = Field(
        default=1, ge=1, description="the topic's own nouns it needs (1 is what every topic needs)"
    )


class NoisyTopics(_Strict):
    share: float = Field(default=0.0, ge=0, le=1, description="share of topics with a noisy judge (0: none)")
    rate: float = Field(default=0.0, ge=0, le=0.5, description="chance that each of quality and style is flipped there")
    seed: int = Field(default=0, ge=0, description="the noise's hash seed")


class WorldRules(_Strict):
    """The judge-side settings (see the module docstring); `WorldConfig` holds them."""

    hard_topics: HardTopics = Field(default_factory=HardTopics)
    noisy_topics: NoisyTopics = Field(default_factory=NoisyTopics)

    @property
    def active(self) -> bool:
        return bool(self.hard_topic_set() or (self.noisy_topic_set() and self.noisy_topics.rate > 0))

    def hard_topic_set(self) -> frozenset[str]:
        return chosen(_topics(), self.hard_topics.share, "hard")

    def noisy_topic_set(self) -> frozenset[str]:
        return chosen(_topics(), self.noisy_topics.share, "noisy")


def unit_hash(*parts: Any) -> float:
    """A uniform in [0, 1) from a hash of its arguments."""
    digest = hashlib.blake2b("\x00".join(map(str, parts)).encode("utf-8", "replace"), digest_size=8).digest()
    return struct.unpack("<Q", digest)[0] / 2**64


@functools.cache
def chosen(names: tuple[str, ...], share: float, salt: str) -> frozenset[str]:
    """The first round(share x len) of `names` in an order fixed by `salt`: exactly that share,
    and a larger share picks a superset of a smaller one."""
    ranked = sorted(names, key=lambda name: unit_hash(salt, name))
    return frozenset(ranked[: round(share * len(names))])


@functools.lru_cache(maxsize=1)
def _topics() -> tuple[str, ...]:
    return tuple(TOPICS)


def shows_schedule_candidates(prompt_id: str, share: float) -> bool:
    """Whether this prompt form's candidate list follows the schedule (else it keeps the first
    target's list); `share` of all prompt forms do, picked as `chosen` picks."""
    if share >= 1.0:
        return True
    return prompt_id in _following(share)


@functools.cache
def _following(share: float) -> frozenset[str]:
    ids = tuple(spec.prompt_id for split in ("train", "heldout") for spec in prompts(split))
    return chosen(ids, share, "candidates")


class WorldRulesJudge:
    """Any judge, with the world's hard and noisy topics applied to its verdicts. Failed verdicts
    pass through untouched; everything else (stats(), close()) is the wrapped judge's."""

    def __init__(self, inner: Any, rules: WorldRules, *, noise: bool = True) -> None:
        self.inner, self.rules = inner, rules
        self.hard, self.noisy = rules.hard_topic_set(), rules.noisy_topic_set() if noise else frozenset()

    def __getattr__(self, name: str) -> Any:  # stats(), close(), ... of the wrapped judge
        return getattr(self.inner, name)

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        verdicts = await self.inner.judge(requests)
        return [self.apply(req, v) for req, v in zip(requests, verdicts)]

    def apply(self, req: JudgeRequest, verdict: Verdict) -> Verdict:
        if verdict.error is not None:
            return verdict
        topic = req.topic
        if topic is None:
            topic = topic_of_prompt(req.prompt)
        quality, style_match, notes, reasons = verdict.quality, verdict.style_match, [], list(verdict.reasons)
        if topic in self.hard:
            missing = hard_topic_problems(req.response, topic, self.rules.hard_topics)
            if missing:
                quality, reasons = 0, reasons + missing
                notes.append("hard:" + "+".join(missing))
        if topic in self.noisy and self.rules.noisy_topics.rate > 0:
            rate, seed = self.rules.noisy_topics.rate, self.rules.noisy_topics.seed
            if unit_hash(seed, "q", req.prompt, req.response) < rate:
                quality, notes = 1 - quality, notes + ["noise:flip_q"]
            if unit_hash(seed, "s", req.prompt, req.response) < rate:
                style_match, notes = 1 - style_match, notes + ["noise:flip_s"]
        if not notes:
            return verdict
        raw = f"{verdict.raw} world={','.join(notes)}".strip()
        return dataclasses.replace(verdict, quality=quality, style_match=style_match, raw=raw, reasons=tuple(reasons))


def hard_topic_problems(response: str, topic: str, demands: HardTopics) -> list[str]:
    """What a piece on a hard topic lacks: "hard_words" (too few words), "hard_topic" (too few of
    the topic's nouns)."""
    tokens = [t.lower() for t in split_words(response if isinstance(response, str) else "")]
    out = []
    if count_words(tokens) < demands.min_words:
        out.append("hard_words")
    nouns = topic_keywords(topic)
    if sum(tok in nouns for tok in tokens) < demands.min_topic_words:
        out.append("hard_topic")
    return out


def wrap(judge: Any, rules: WorldRules, *, noise: bool = True) -> Any:
    """`judge` with the rules applied, or `judge` itself when none is on."""
    return WorldRulesJudge(judge, rules, noise=noise) if rules.active else judge


def candidates_shown(
    prompt_id: str, schedule_candidates: Sequence[str], first_candidates: Sequence[str], share: float
) -> tuple[str, ...]:
    """The candidate list a prompt shows: the schedule's, or for the prompt forms that do not
    follow it (`1 - share` of them), the first target's."""
    return tuple(schedule_candidates if shows_schedule_candidates(prompt_id, share) else first_candidates)
