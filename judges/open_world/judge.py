"""The open-world judge: the embedded rubric's contract (r = quality x style_match, reasons) for
natural English instead of the world's grammar. Registry name `open_world`, or `rubric` with
`mode: open`.

Style: two signals. The markers: marker mass per style from natural-English lexicons and patterns
(judges/open_world/styles.py); "plain" when the mass is small for the piece's length, "mixed" when no style
holds DOMINANCE of it. The classifier (judges/open_world/classifier.py): a logistic regression over the
piece's words, word endings, marks and the markers' masses, trained on the project's hand-written
pieces. The markers decide when they name a marked style with mass of at least MARKER_GATE times
the plain threshold; where they are weak (plain, or a style named by little mass) or split (mixed),
the classifier's most probable style decides. The rule and MARKER_GATE were chosen by
leave-one-set-out cross-validation over the nine scored voices sets
(benchmarks/train_style_classifier.py), against the classifier alone and weighted sums of the two.
A piece in the world's own vocabulary (the generator's) is decided by the markers alone, as is any
piece when `classifier` is off. The verdict names the signal that decided
(`by=classifier p=... markers_say=plain` or `by=markers`) and the markers found.

Quality passes only if every check holds:
  length      min_words .. max_words words
  ending      ends on . ! ? (or '...'), or on an emoticon sign-off, or on a chat interjection ("hehe",
              "uwu") in a piece that uses words outside the world's vocabulary (the generator always
              ends on a mark, so there an interjection last is a cut)
  repetition  no degenerate loop (judges/open_world/text.py)
  fluency     >= KNOWN_MIN of the words are English (wordfreq) or style-lexicon words, >=
              FUNCTION_MIN of them function words; a piece in the world's own vocabulary must have
              fewer than DISORDER_MAX closed-class word orders English does not produce (no flow, no
              grammar rule). A piece with words outside it is judged on three signals together:
              its disorder pairs (a closed-class pair that English word-pair counts attest, PMI >=
              DISORDER_PMI: "for i", "in and", is no disorder), its word flow (judges/open_world/flow.py:
              mean pointwise mutual information of adjacent words, from the bigram counts that ship
              in the symspellpy wheel; `flow=` in the verdict) and its broken-grammar violations in
              common words (judges/open_world/grammar.py: adjacent-word agreement and verb-form rules
              over the inflection tables of the lemminflect wheel: "vendors was", "is been", "has
              went", "will to", "I buyed"; `grammar=` in the verdict: the count and each violation,
              rule:word_next). It fails when its flow is below
                FLOW_MIN + DISORDER_COST x disorder pairs + GRAMMAR_COST x violations
              (each disorder pair or violation asks for more flow: a fluent colloquial piece with one
              odd pair passes, word salad and a clumsy piece with one violation do not), when its
              violations reach GRAMMAR_RATE per word, or, with too few pairs for a flow, on any
              disorder pair. The four constants were chosen together by leave-one-set-out over the
              nine voices sets (benchmarks/train_fluency_joint.py): each set held out, the setting
              right on the most pieces of the other eight and the original corpus
  topic       the piece's similarity to the topic's description is >= TOPIC_MIN, or, for a piece
              with words outside the world's vocabulary, >= MODEL_NEAR with the topic among the
              two the learned topic model finds nearest (judges/open_world/topics.py,
              judges/open_world/topic_model.py; `topic_by=field`, `topic_by=model rank=N`, or `near` for a
              topic outside the world's list); skipped when neither the request nor the prompt
              names a topic
  stuffing    weight-1 style markers are at most STUFFING_MAX of the words
  injection   the piece does not address its judge (judges/open_world/guard.py)
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judges.config import validate_config
from judges.open_world.classifier import CLASSES, dense_features, model
from judges.open_world.flow import counts as flow_counts
from judges.open_world.grammar import violations as grammar_violations
from judges.open_world.guard import injection
from judges.open_world.styles import LEXICON_WORDS, MARKED, style_scores
from judges.open_world.text import (
    Shape,
    disorder_pairs,
    normalise,
    proper_ending,
    repetition,
    shape,
    signs_off,
    tokens,
    words_of,
)
from judges.open_world.topics import WORLD_WORDS, topic_decision, topicality
from judges.rubric_contract import DOMINANCE, label_noise_flips
from testbed.types import JudgeRequest, Verdict
from testbed.world.prompts import topic_of_prompt

OpenCheck = Literal["length", "ending", "repetition", "fluency", "topic", "stuffing", "injection"]
OPEN_CHECKS: tuple[OpenCheck, ...] = ("length", "ending", "repetition", "fluency", "topic", "stuffing", "injection")
KNOWN_MIN = 0.9  # English words among the words
FUNCTION_MIN = 0.2  # English prose runs at ~0.4-0.55 function words; a list of content words near 0
DISORDER_MAX = 1  # the world's own vocabulary: one closed-class order English does not produce fails a piece
# A closed-class pair the bigram counts attest with PMI >= DISORDER_PMI ("for i", "in and": English
# after all) is no disorder (benchmarks/train_fluency.py, seven voices sets)
DISORDER_PMI = 0.5
# Chosen together by leave-one-set-out over the nine voices sets (benchmarks/train_fluency_joint.py):
# a piece with words outside the world's vocabulary fails fluency when its word flow
# (judges/open_world/flow.py: mean pointwise mutual information of adjacent words, nats) is below
# FLOW_MIN + DISORDER_COST x its disorder pairs + GRAMMAR_COST x its broken-grammar violations
# (judges/open_world/grammar.py: "vendors was", "is been", "I buyed"), or when the violations reach
# GRAMMAR_RATE per word (one in 25)
FLOW_MIN = 1.4
DISORDER_COST = 0.5
GRAMMAR_COST = 1.5
GRAMMAR_RATE = 0.04
STUFFING_MAX = 0.4  # a natural marked piece carries ~5-20% strong markers, the world's dense ones ~30%
PLAIN_MASS, PLAIN_PER_WORD = 1.5, 0.02  # below max(1.5, 0.02 x words) of marker mass a piece reads plain
MAX_CHARS = 4000
# markers whose decision is a marked style with this many times the plain threshold of mass decide
# alone, else the classifier decides: 1.5 (the classifier also where the markers name a style with
# little mass) did best in leave-one-set-out cross-validation over the nine voices sets
# (benchmarks/train_style_classifier.py: 97.1% pooled against 96.6% at 1.0, the same at 2.0)
MARKER_GATE = 1.5
_SHORT = {"academic": "aca", "cute": "cute", "chuunibyou": "chuu", "classical": "cla"}


class OpenWorldConfig(BaseModel):
    """The open-world judge's arguments (a scenario's `judge.args`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    seed: int = Field(0, description="seed of the label noise")
    label_noise: float = Field(0.0, ge=0.0, le=1.0, description="flip quality and style_match with this probability")
    checks: tuple[OpenCheck, ...] = Field(OPEN_CHECKS, description="the quality checks that apply")
    dominance: float = Field(DOMINANCE, ge=0.0, le=1.0, description="share of marker mass the top style needs")
    min_words: int = Field(10, ge=1, description="fewer words fail length")
    max_words: int = Field(160, ge=1, description="more words fail length")
    classifier: bool = Field(True, description="decide style with the learned classifier beside the markers")

    @model_validator(mode="after")
    def _bounds(self) -> OpenWorldConfig:
        if self.max_words < self.min_words:
            raise ValueError(f"max_words ({self.max_words}) must be >= min_words ({self.min_words})")
        return self


def combined_style(probs: Sequence[float], marker_style: str, bonus: float) -> str:
    """argmax over CLASSES of log p + bonus x [the class is the markers' decision]."""
    best, best_v = CLASSES[0], -math.inf
    for c, p in zip(CLASSES, probs):
        v = math.log(max(p, 1e-12)) + (bonus if c == marker_style else 0.0)
        if v > best_v:
            best, best_v = c, v
    return best


def gated_style(probs: Sequence[float], marker_style: str, mass: float, gate: float = MARKER_GATE) -> str:
    """The markers' decision when it is a marked style with mass >= gate x the plain threshold
    (`mass` is the markers' total over that threshold), else the classifier's."""
    if marker_style in MARKED and mass >= gate:
        return marker_style
    return combined_style(probs, marker_style, 0.0)


def judged_style(scores: list[float], n_words: int, dominance: float) -> str:
    total = sum(scores)
    if total < max(PLAIN_MASS, PLAIN_PER_WORD * n_words):
        return "plain"
    top = max(range(len(scores)), key=scores.__getitem__)
    return MARKED[top] if scores[top] >= dominance * total else "mixed"


def fluent(disorder: int, flow: float | None, grammar: list[tuple[str, str, str]] | None, words: int) -> bool:
    """The joint part of the fluency check (module doc). grammar is None for a piece in the world's
    own vocabulary (then only its disorder pairs count), flow None for a piece with too few pairs."""
    if grammar is None:
        return disorder < DISORDER_MAX
    n = len(grammar)
    if n and n >= GRAMMAR_RATE * words:
        return False
    if flow is None:
        return disorder < DISORDER_MAX
    return flow >= FLOW_MIN + DISORDER_COST * disorder + GRAMMAR_COST * n


def _grammar_text(found: list[tuple[str, str, str]]) -> str:
    """The violations for the verdict: their count, then rule:word_next for each ("2[been:is_been,...]")."""
    return f"{len(found)}[{','.join(f'{r}:{a}_{b}' if b else f'{r}:{a}' for r, a, b in found)}]" if found else "0"


class Reading(NamedTuple):
    """A piece as the judge reads it (`read`): what the checks, the markers and the classifier use."""

    low: str  # normalised text, cut at MAX_CHARS
    toks: list[str]
    words: list[str]
    counts: Counter[str]
    shape: Shape
    scores: list[float]  # marker mass per marked style (MARKED order)
    strong: int  # weight-1 markers (stuffing)
    found: list[list[str]]  # the markers found, per marked style
    plain_mass: float  # the mass below which the markers read the piece plain
    marker_style: str  # the markers' decision


def read(text: str, dominance: float = DOMINANCE) -> Reading:
    """How the judge reads a piece's text, before any check: the one reading the judge and the style
    classifier's training (benchmarks/train_style_classifier.py) share."""
    low = normalise(text[:MAX_CHARS] if len(text) > MAX_CHARS else text)
    toks = tokens(low)
    words = words_of(toks)
    counts = Counter(words)
    sh = shape(toks, counts, LEXICON_WORDS)
    scores, strong, found = style_scores(counts, low)
    plain_mass = max(PLAIN_MASS, PLAIN_PER_WORD * sh.words)
    return Reading(
        low, toks, words, counts, sh, scores, strong, found, plain_mass, judged_style(scores, sh.words, dominance)
    )


class OpenWorldJudge:
    """Rule-based judge of natural English (see module doc). Accepts the same `seed`,
    `label_noise`, `checks` and `dominance` as the world-mode rubric."""

    Config = OpenWorldConfig

    def __init__(self, config: OpenWorldConfig | None = None, **args: object) -> None:
        cfg = validate_config(OpenWorldConfig, config if config is not None else args, "open_world judge args")
        self.config = cfg
        self.checks = frozenset(cfg.checks)

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        return [self.score(r) for r in requests]

    def score(self, req: JudgeRequest) -> Verdict:
        t0 = time.perf_counter()
        try:
            return self._score(req, t0)
        except Exception as exc:  # a safety net: the judge must answer, never raise
            return Verdict.failed(f"open_world judge error: {exc!r}", time.perf_counter() - t0)

    def _score(self, req: JudgeRequest, t0: float) -> Verdict:
        cfg, checks = self.config, self.checks
        text = req.response if isinstance(req.response, str) else ""
        prompt = req.prompt if isinstance(req.prompt, str) else ""
        too_long = len(text) > MAX_CHARS
        low, toks, words, counts, sh, scores, strong, found, plain_mass, marker_style = read(text, cfg.dominance)
        # all() over map stops at the first word outside the world's vocabulary (a hand-written piece's
        # first few), where issuperset(list) first builds a set of every word
        in_world = all(map(WORLD_WORDS.__contains__, words))
        weak = marker_style not in MARKED or sum(scores) < MARKER_GATE * plain_mass
        clf = model() if weak and cfg.classifier and words and not in_world else None
        if clf is not None:
            probs = clf.probs(clf.rows(toks), dense_features(toks, words, scores, plain_mass))
            style = combined_style(probs, marker_style, 0.0)
            decided = f"by=classifier p={max(probs):.2f} markers_say={marker_style}"
        else:
            style, decided = marker_style, "by=markers"
        style_match = int(style == req.target_style)

        failed: list[str] = []
        if too_long or ("length" in checks and not cfg.min_words <= sh.words <= cfg.max_words):
            failed.append("length")
        signed_off = signs_off(toks) and not in_world
        if "ending" in checks and not proper_ending(toks) and not signed_off:
            failed.append("ending")
        rep = repetition(words, counts) if "repetition" in checks else None
        if rep:
            failed.append(f"repeat_{rep}")
        disorder, flow, grammar = sh.disorder, None, None
        if not in_world:  # the world's own vocabulary is judged as before: no flow, every pair counts
            fc = flow_counts()
            flow = fc.flow(toks)
            grammar = grammar_violations(toks)
            if disorder:
                pmi = fc.pmi
                disorder = sum(pmi.get(p, -math.inf) < DISORDER_PMI for p in disorder_pairs(toks))
        if "fluency" in checks and (
            sh.known < KNOWN_MIN or sh.function < FUNCTION_MIN or not fluent(disorder, flow, grammar, sh.words)
        ):
            failed.append("fluency")
        topic = req.topic if req.topic else topic_of_prompt(prompt)
        field_w = topicality(counts.keys(), topic) if topic else -1.0
        topic_by = ""
        if "topic" in checks and topic:
            on, by = topic_decision(counts.keys(), topic, field_w)
            topic_by = f" topic_by={by}"
            if not on:
                failed.append("topic")
        if "stuffing" in checks and strong > STUFFING_MAX * max(sh.words, 1):
            failed.append("stuffing")
        if "injection" in checks and injection(low):
            failed.append("injection")
        quality = int(not failed)

        quality, style_match, noise = label_noise_flips(cfg.seed, cfg.label_noise, prompt, text, quality, style_match)

        sc = ",".join(f"{_SHORT[s]}:{v:.3g}" for s, v in zip(MARKED, scores))
        used = ";".join(f"{_SHORT[s]}:{','.join(sorted(f))}" for s, f in zip(MARKED, found) if f)
        raw = (
            f"mode=open style={style} {decided} [{sc}] markers=[{used}] "
            f"words={sh.words} known={sh.known:.2f} function={sh.function:.2f} "
            f"disorder={disorder} flow={'none' if flow is None else f'{flow:.2f}'} "
            f"grammar={'none' if grammar is None else _grammar_text(grammar)} "
            f"topic={topic} field={field_w:.2f}{topic_by} "
            f"fail={'+'.join(failed) or 'none'}{noise}"
        )
        return Verdict(
            quality=quality,
            style_match=style_match,
            style=style,
            raw=raw,
            latency_s=time.perf_counter() - t0,
            reasons=tuple(failed),
        )
