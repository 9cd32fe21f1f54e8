"""One episode's start and record, shared by every writing environment: ``EpisodeStart`` (the
rendered prompt, its clock, hidden target and sampling stream), ``episode_info`` (the row the run
directory keeps), ``SingleTurn`` (one response per start) and ``sample_responses`` /
``sample_revisions`` (an engine called with the starts' streams where it takes them)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.types import JudgeRequest, Target, Verdict

__all__ = [
    "EpisodeStart",
    "SingleTurn",
    "episode_info",
    "sample_responses",
    "sample_revisions",
    "stream_id",
    "takes_streams",
]


def stream_id(seed: int | None, kind: str, *parts: int) -> int:
    """An episode's sampling stream (`sampling.streams: episode`, testbed/engines/streams.py): a
    64-bit hash of the env's seed, the kind of episode ("train", "eval", "told") and where it
    stands (its clock; an evaluation's prompt index too). Nothing of the arm goes in: the arms of
    a seed share it, and with it their sampling noise."""
    text = "/".join([str(seed), kind, *(str(int(p)) for p in parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class EpisodeStart:
    """The start of one episode: the rendered prompt, where it came from, its clock and target.
    The target's style is hidden from the policy; only ``prompt_text`` goes to the model."""

    prompt_text: str
    prompt_id: str
    topic: str
    t: int
    target: Target
    stream: int | None = None  # the episode's sampling stream (stream_id); None: the engine's own
    judge: str | None = None  # the judge in force at its clock (a schedule's `judge_at`); None: the scenario's

    def request(self, response: str) -> JudgeRequest:
        """The judge request for ``response`` to this episode."""
        return JudgeRequest(
            prompt=self.prompt_text,
            response=response,
            target_style=self.target.style,
            candidate_styles=self.target.candidates,
            topic=self.topic,
            judge=self.judge,
        )


def episode_info(start: EpisodeStart, verdict: Verdict) -> dict[str, Any]:
    """One episode's record, with the run directory's column names: ``target_style,
    judged_style, r_quality, r_style, t, judge_error, prompt_id, topic``. ``judge_error`` is the
    error message (None when judged); with an error the r_* values are 0 and mean nothing."""
    return {
        "target_style": start.target.style,
        "judged_style": verdict.style,
        "r_quality": int(verdict.quality),
        "r_style": int(verdict.style_match),
        "t": start.t,
        "judge_error": verdict.error,
        "prompt_id": start.prompt_id,
        "topic": start.topic,
        **({"judge": start.judge} if start.judge else {}),  # a schedule that changes the judge
    }


class SingleTurn:
    """One response per start (an episode is a prompt and a response)."""

    def __call__(self, engine: Any, starts: Sequence[EpisodeStart], review: Any = None) -> list:
        return sample_responses(engine, starts)


@functools.cache
def _takes_streams(method: Any) -> bool:
    try:
        return "streams" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def takes_streams(engine: Any) -> bool:
    """Whether the engine's `generate` takes the starts' sampling streams (`streams=`)."""
    method = getattr(engine, "generate", None)  # the instance's own where a wrapper replaced it
    return _takes_streams(getattr(method, "__func__", method))


def _streams(starts: Sequence[Any]) -> list[int] | None:
    streams: list[int | None] = [getattr(s, "stream", None) for s in starts]
    known = [s for s in streams if s is not None]
    return known if len(known) == len(streams) else None


def sample_responses(engine: Any, starts: Sequence[Any]) -> list:
    """One response per start: `engine.generate` with the starts' streams where it takes them
    (an engine written before streams, or starts without them, sample as they always did)."""
    prompts = [s.prompt_text for s in starts]
    if takes_streams(engine):
        return engine.generate(prompts, streams=_streams(starts))
    return engine.generate(prompts)


def sample_revisions(engine: Any, trajectories: list, starts: Sequence[Any], observations: list[str]) -> None:
    """`engine.extend` (multi-turn), with the starts' streams where the engine's generate takes them."""
    if takes_streams(engine):
        engine.extend(trajectories, observations, streams=_streams(starts))
    else:
        engine.extend(trajectories, observations)
