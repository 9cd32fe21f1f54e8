"""RevisionEnv: the policy drafts, an editor answers, the policy revises; the judge scores the last draft.

An episode is a trajectory T = [prompt, a_0, o_0, a_1, o_1, ..., a_k]: each a_i a draft the policy
wrote, each o_i the editor's note on it (environment text: no log-prob, no loss, and for SAO no
advantage). The editor reads a draft through the judge, at the target of the episode's clock, and
accepts it (reward 1: the episode ends) or writes a note; after `max_turns` drafts the episode ends
anyway. The judge then scores the last draft like any single-turn response: that verdict is the
episode's reward and moves the drift clock by one, exactly as in `StyleShiftEnv` (one episode is
one judged trajectory). Every read is a counted judge call: an episode of k drafts costs k calls
if its last draft was the max_turns-th, and k + 1 if the editor accepted it (accepted, then scored
at the clock it is judged at, which in an asynchronous run may carry a newer target).

What the note says (`feedback`):
  informative  the judge's failed quality checks, in words (off topic, the length is wrong, it
               repeats itself, ...) and what is wrong with the register (it reads as cute; too
               plain; mixed), never the hidden target unless `hints` is on;
  boilerplate  the same sentence whatever was wrong. It still carries one bit: a note at all
               means the draft was not accepted.
`hints: true` adds the target style by name (the register note then tells the policy what to do).
`turn_rewards: true` also puts each earlier draft's verdict on that draft's last token (a
per-turn reward); by default only the last draft is rewarded.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field

from testbed import registry
from testbed.envs.episode import sample_responses, sample_revisions
from testbed.envs.style_shift import EpisodeStart, StyleShiftEnv
from testbed.types import JudgeRequest, Trajectory, Verdict
from testbed.world import CORRUPTIONS, STYLES, PromptSpec, corrupt, generate, prompts, render_prompt, split_words

if TYPE_CHECKING:
    from testbed.protocols import DriftSchedule, Engine, Judge

__all__ = ["Revision", "RevisionConfig", "RevisionEnv", "editor_note", "editor_words"]

CHECK_NOTES = {  # a judge's failed quality check -> the editor's words for it
    "length": "the length is wrong",
    "ending": "it stops before the end",
    "repeat": "it repeats itself",
    "fluency": "the words are out of order",
    "topic": "it is off topic",
}
OTHER_NOTE = "the writing falls short"  # a failed quality check the judge did not name
BOILERPLATE = "editor: please revise the piece."


class RevisionConfig(BaseModel):
    """RevisionEnv's settings (the scenario's `env.args`)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(3, ge=1, le=8, description="drafts per episode at most (1: single-turn)")
    feedback: Literal["informative", "boilerplate"] = Field(
        "informative", description="the judge's findings in words, or the same sentence every time"
    )
    hints: bool = Field(False, description="the note names the hidden target style")
    turn_rewards: bool = Field(False, description="reward each earlier draft on its last token too")


def editor_note(verdict: Verdict, target_style: str, config: RevisionConfig) -> str | None:
    """The editor's note on a draft, or None when it accepts it (reward 1, or a failed read: the
    episode then ends and the judge scores the draft as it is)."""
    if verdict.error is not None or verdict.reward == 1:
        return None
    if config.feedback == "boilerplate":
        return BOILERPLATE
    parts = []
    if not verdict.quality:
        named = [CHECK_NOTES[r.split("_")[0]] for r in verdict.reasons if r.split("_")[0] in CHECK_NOTES]
        parts += list(dict.fromkeys(named)) or [OTHER_NOTE]
    if not verdict.style_match:
        if verdict.style == "plain":
            parts.append("it is too plain")
        elif verdict.style == "mixed" or verdict.style is None:
            parts.append("the voice is mixed")
        else:
            parts.append(f"it reads as {verdict.style}, the wrong register")
    if config.hints:
        parts.append(f"we want {target_style}")
    return "editor: " + ", ".join(parts) + "."


def editor_words(styles: Sequence[str]) -> list[str]:
    """Every word a note can hold (the tokenizer adds those the world lacks)."""
    texts = [
        *CHECK_NOTES.values(),
        OTHER_NOTE,
        BOILERPLATE,
        "it is too plain",
        "the voice is mixed",
        "it reads as, the wrong register",
        "we want",
        "editor: .",
        *styles,
    ]
    return sorted({w for text in texts for w in split_words(text)})


class Revision:
    """Every turn of a round of episodes (picklable: a rollout actor runs it next to its engine).

    `review(starts, drafts) -> verdicts` is the editor's read: judge calls at each start's own
    target that leave the clock alone (the env's `evaluate_batch`, or a rollout actor's judge).
    The last drafts are left for the env's `step_batch` to score; each trajectory keeps the
    verdicts on its earlier drafts and the notes."""

    def __init__(self, config: RevisionConfig):
        self.config = config

    def __call__(self, engine: Engine, starts: Sequence[EpisodeStart], review: Any) -> list[Trajectory]:
        if self.config.max_turns > 1 and not callable(getattr(engine, "extend", None)):
            raise TypeError(
                f"the revision env continues trajectories: engine {type(engine).__name__} needs "
                "extend(trajectories, observations)"
            )
        trajs = sample_responses(engine, starts)
        for traj in trajs:
            traj.turn_rewards = self.config.turn_rewards
        open_ = list(range(len(trajs)))
        for _ in range(self.config.max_turns - 1):
            if not open_:
                break
            verdicts = review([starts[i] for i in open_], [trajs[i].response_text for i in open_])
            revising, notes = [], []
            for i, verdict in zip(open_, verdicts):
                trajs[i].turn_verdicts.append(verdict)
                note = editor_note(verdict, starts[i].target.style, self.config)
                if note is not None:
                    trajs[i].notes.append(note)
                    revising.append(i)
                    notes.append(note)
            if revising:
                sample_revisions(engine, [trajs[i] for i in revising], [starts[i] for i in revising], notes)
            open_ = revising
        return trajs


class RevisionEnv(StyleShiftEnv):
    """Multi-turn writing with editor feedback and a hidden, drifting target (module docstring).

    Gymnasium API: ``reset()`` gives the prompt; ``step(draft)`` gives the editor's note as the
    observation (reward 0, or the draft's reward with ``turn_rewards``; not terminated) until the
    editor accepts or ``max_turns`` drafts are written, then the judge's reward with
    ``terminated=True``. Batched: ``rollout(engine, starts)`` runs every turn for a round of
    episodes and leaves the last drafts for ``step_batch`` to score.
    """

    Config = RevisionConfig

    def __init__(
        self,
        judge: Judge,
        schedule: DriftSchedule,
        prompt_specs: Sequence[PromptSpec],
        *,
        seed: int = 0,
        config: RevisionConfig | dict | None = None,
        max_prompt_chars: int = 512,
        max_response_chars: int = 2048,
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(
            judge,
            schedule,
            prompt_specs,
            seed=seed,
            max_prompt_chars=max_prompt_chars,
            max_response_chars=max_response_chars,
            render_mode=render_mode,
        )
        base = config.model_dump() if isinstance(config, RevisionConfig) else dict(config or {})
        self.config = RevisionConfig.model_validate({**base, **settings})
        # The observation is the prompt, then each note: both printable text.
        self.observation_space = spaces.Text(
            max_length=max(self.max_prompt_chars, 256), min_length=0, charset=string.printable
        )
        self.editor_calls = 0  # the editor's reads (judge calls that do not move the clock)
        self._turn = 0

    @staticmethod
    def context_tokens(config: RevisionConfig, max_new_tokens: int) -> int:
        """The longest episode in tokens, bounded: a prompt (<= 32), every draft at full length,
        a note (<= 48) between two drafts. The scenario checks it against policy.max_positions."""
        return 32 + config.max_turns * max_new_tokens + (config.max_turns - 1) * 48

    # ---- what the SFT policy learns from (testbed.models.sft) --------------------------------
    @staticmethod
    def extra_words() -> list[str]:
        return editor_words(STYLES)

    @staticmethod
    def sft_key(config: RevisionConfig) -> dict[str, Any]:
        """What the corpus depends on: not the feedback setting (one starting policy for all)."""
        return {"max_turns": config.max_turns, "corpus": 1}

    @staticmethod
    def sft_examples(size: int, archetypes: list[str], seed: int, config: RevisionConfig) -> list:
        """Revision episodes the SFT policy imitates, so RL starts from a model that uses notes.

        Each example: a prompt with candidates and a hidden target drawn from them; a first draft
        in a uniformly drawn candidate style, damaged 30% of the time (one of the world's
        corruptions; the policy is not trained to write those, only to read them); the rubric's
        verdict and the editor's note on it, with informative, boilerplate or hinted notes in
        equal shares whatever the scenario uses (one starting policy for every feedback setting);
        then a clean revision: the target style if hinted, the same style if only the quality
        failed, else a candidate the note did not rule out. Up to `max_turns` drafts, until the
        editor accepts."""
        rng = random.Random(seed)
        rubric = registry.load("judge", "rubric")()
        specs = prompts("train")
        kinds = [
            RevisionConfig(max_turns=config.max_turns, feedback="informative"),
            RevisionConfig(max_turns=config.max_turns, feedback="boilerplate"),
            RevisionConfig(max_turns=config.max_turns, feedback="informative", hints=True),
        ]
        examples = []
        for _ in range(size):
            spec, editor = rng.choice(specs), rng.choice(kinds)
            candidates = rng.sample(archetypes, rng.randint(min(2, len(archetypes)), len(archetypes)))
            prompt, target = render_prompt(spec, candidates), rng.choice(candidates)
            style, damaged = rng.choice(candidates), rng.random() < 0.3
            segments: list[tuple[str, str, bool]] = []
            for turn in range(config.max_turns):
                draft = generate(style, spec.topic, rng)
                if damaged:
                    draft = corrupt(draft, rng.choice(CORRUPTIONS), rng, style=style, topic=spec.topic)
                segments.append(("action", draft, not damaged))
                verdict = rubric.score(JudgeRequest(prompt, draft, target, tuple(candidates), spec.topic))
                note = editor_note(verdict, target, editor)
                if note is None or turn == config.max_turns - 1:
                    break
                segments.append(("observation", note, False))
                if editor.hints:
                    style = target
                elif editor.feedback == "informative" and verdict.style_match:
                    pass  # only the quality failed: keep the voice
                else:
                    others = [c for c in candidates if c != verdict.style and c != style] or candidates
                    style = rng.choice(others)
                damaged = rng.random() < 0.1
            examples.append((prompt, segments))
        return examples

    # ---- batched path (the training loop) --------------------------------------------------
    def episode_runner(self) -> Revision:
        return Revision(self.config)

    def rollout(self, engine: Engine, starts: Sequence[EpisodeStart]) -> list[Trajectory]:
        trajs = super().rollout(engine, starts)
        self.editor_calls += sum(len(t.turn_verdicts) for t in trajs)
        return trajs

    # ---- Gymnasium API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One draft. Not the last: the editor's note, reward 0 (the draft's with turn_rewards).
        The last (accepted, or the max_turns-th): the judge's verdict, terminated."""
        if self._episode is None:
            raise RuntimeError("no open episode: call reset() before step()")
        start = self._episode
        self._turn += 1
        if self._turn < self.config.max_turns:
            verdict = self.evaluate_batch([start], [action])[0]
            self.editor_calls += 1
            note = editor_note(verdict, start.target.style, self.config)
            if note is not None:
                reward = float(verdict.reward) if self.config.turn_rewards else 0.0
                return note, reward, False, False, {"turn": self._turn, "note": note, "t": start.t}
        prompt, reward, terminated, truncated, info = super().step(action)
        return prompt, reward, terminated, truncated, {**info, "turn": self._turn}
