"""One episode's start and record, shared by every writing environment: ``EpisodeStart`` (the
rendered prompt, its clock and hidden target), ``episode_info`` (the row the run directory keeps)
and ``SingleTurn`` (one response per start)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.types import JudgeRequest, Target, Verdict

__all__ = ["EpisodeStart", "SingleTurn", "episode_info"]


@dataclass(frozen=True)
class EpisodeStart:
    """The start of one episode: the rendered prompt, where it came from, its clock and target.
    The target's style is hidden from the policy; only ``prompt_text`` goes to the model."""

    prompt_text: str
    prompt_id: str
    topic: str
    t: int
    target: Target

    def request(self, response: str) -> JudgeRequest:
        """The judge request for ``response`` to this episode."""
        return JudgeRequest(
            prompt=self.prompt_text,
            response=response,
            target_style=self.target.style,
            candidate_styles=self.target.candidates,
            topic=self.topic,
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
    }


class SingleTurn:
    """One response per start (an episode is a prompt and a response)."""

    def __call__(self, engine: Any, starts: Sequence[EpisodeStart], review: Any = None) -> list:
        return engine.generate([s.prompt_text for s in starts])
