"""The data that flows through an experiment: judge requests and verdicts, drift targets, and
the Trajectory that carries one episode from the engine through the env to the trainer and store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import torch


@dataclass(frozen=True)
class JudgeRequest:
    """One response to score. `topic` lets a judge check topicality without parsing the prompt.
    `judge` names which of a scenario's judges scores it where the drift schedule changes the
    judge (`judge_at`; testbed/judging/panel.py routes on it); None: the scenario's `judge`.
    A judge itself never needs to read it."""

    prompt: str
    response: str
    target_style: str
    candidate_styles: tuple[str, ...]
    topic: str | None = None
    judge: str | None = None


# A judge error that starts with this is a refusal that no retry can change (the provider refuses
# the key: an exhausted balance, a key for another plan, a revoked key), not an outage: the run
# stops at the first one, with a checkpoint, instead of spending its judge-failure budget on calls
# that cannot succeed (testbed/runtimes/learn.py, `Guard`). Any judge may return one.
JUDGE_REFUSED = "judge refused: "


def judge_refused(error: str | None) -> bool:
    """Whether a verdict's error is a refusal (`JUDGE_REFUSED`) rather than an outage."""
    return isinstance(error, str) and error.startswith(JUDGE_REFUSED)


@dataclass(frozen=True)
class Verdict:
    """A judge's answer. A verdict with `error` set is not a zero reward: the episode is excluded
    from training and counted as a judge failure."""

    quality: int  # 0 | 1
    style_match: int  # 0 | 1
    style: str | None  # the style the judge read in the text ("mixed"/"plain" allowed)
    raw: str = ""  # the judge's own output (an LLM's text, or the rubric's feature summary)
    error: str | None = None
    latency_s: float = 0.0
    reasons: tuple[str, ...] = ()  # the quality checks that failed, where the judge names them (the editor reads them)

    @property
    def reward(self) -> float:
        return float(self.quality * self.style_match)

    @classmethod
    def failed(cls, error: str, latency_s: float = 0.0) -> Verdict:
        return cls(quality=0, style_match=0, style=None, error=error, latency_s=latency_s)


@dataclass(frozen=True)
class Target:
    """What the hidden reward wants at a clock value: the style, and the candidate styles the
    prompt offers (the system prompt lists them, as in the paper)."""

    style: str
    candidates: tuple[str, ...]


@dataclass
class Segment:
    """A span of tokens: `action` (model-generated, with behaviour log-probs) or `observation`."""

    kind: Literal["action", "observation"]
    tokens: list[int]
    logprobs: list[float] | None = None  # behaviour log-probs, one per token, actions only

    def __post_init__(self) -> None:
        if self.kind == "action" and (self.logprobs is None or len(self.logprobs) != len(self.tokens)):
            raise ValueError("an action segment needs one behaviour log-prob per token")


@dataclass
class Trajectory:
    """One episode. The engine fills prompt and segments; the env fills verdict and clock;
    the loop fills arm/seed/group bookkeeping."""

    prompt_tokens: list[int]
    segments: list[Segment]
    response_text: str = ""
    prompt_text: str = ""
    prompt_id: str = ""
    topic: str = ""
    policy_version: int = 0
    t: int = -1
    target_style: str = ""
    verdict: Verdict | None = None
    arm: str = ""
    seed: int = 0
    group_id: int = 0
    candidates: tuple[str, ...] = ()  # the candidate styles of the target it was judged against
    generation_target: str = ""  # the target style when it was generated (async: may be an older one)
    generation_t: int = -1  # the clock it was issued for
    # Multi-turn episodes (RevisionEnv): the verdict on each draft before the last, at the
    # generation-time target (the last draft's verdict is `verdict`), and the editor's notes.
    turn_verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    turn_rewards: bool = False  # put each earlier draft's reward on its last token too
    gold_verdict: Verdict | None = None  # the gold judge's verdict (scenario.gold_judge), where it scored this episode
    judge: str = ""  # which of the scenario's judges scored it, where the schedule changes the judge (else "")
    sim_times: dict[str, float] = field(default_factory=dict)  # the simulated runtime: sim_start_s, sim_done_s, ...
    # The prompt's expected reward under the policy that generated it, estimated from other samples
    # that are judged but never trained on (a trainer's `baseline_samples`: the upper-bound baseline).
    baseline_reward: float | None = None
    # The engine's MoE routing: for each token it fed through the model (prompt + segments but the
    # last), the expert ids of every MoE layer, [positions, layers, top_k] uint8 (int16 past 256
    # experts); None where the engine records none (testbed/models/routing.py).
    experts: np.ndarray | None = None

    @property
    def reward(self) -> float:
        return 0.0 if self.verdict is None else self.verdict.reward

    @property
    def turns(self) -> int:
        """Drafts written (action segments)."""
        return sum(seg.kind == "action" for seg in self.segments)

    def judge_calls(self) -> int:
        """Judge calls this episode cost: one per draft the editor read, plus the final one."""
        return len(self.turn_verdicts) + 1

    def token_rewards(self) -> list[tuple[int, float]]:
        """(offset in the response, reward) pairs: the episode reward on the last action token,
        and with `turn_rewards` each earlier draft's reward on that draft's last token."""
        ends, offset = [], 0
        for seg in self.segments:
            offset += len(seg.tokens)
            if seg.kind == "action" and seg.tokens:
                ends.append(offset - 1)
        if not ends:
            return []
        earlier = (
            [(end, v.reward) for end, v in zip(ends[:-1], self.turn_verdicts) if v.error is None]
            if self.turn_rewards
            else []
        )
        return [*earlier, (ends[-1], self.reward)]

    @property
    def response_tokens(self) -> list[int]:
        return [tok for seg in self.segments for tok in seg.tokens]

    def token_layout(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens, action_mask, behaviour_logprobs) over prompt + segments, as 1-D tensors.
        Prompt and observation positions have mask 0 and log-prob 0."""
        import torch  # here, so judges and the judge server start without loading torch

        toks = list(self.prompt_tokens)
        mask = [0] * len(toks)
        lps = [0.0] * len(toks)
        for seg in self.segments:
            toks += seg.tokens
            is_action = seg.kind == "action"
            mask += [int(is_action)] * len(seg.tokens)
            lps += seg.logprobs if is_action and seg.logprobs is not None else [0.0] * len(seg.tokens)
        return torch.tensor(toks), torch.tensor(mask, dtype=torch.bool), torch.tensor(lps)
