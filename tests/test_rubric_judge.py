"""The embedded rubric judge: agreement with the world, determinism, noise, robustness, speed."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from judges.rubric import RubricJudge
from testbed.protocols import Judge
from testbed.types import JudgeRequest, Verdict
from testbed.world import CORRUPTIONS, STYLES, corrupt, generate, prompts, render_prompt

PER_STYLE = 200


def _req(text: str, target: str, topic: str | None = "coffee", prompt: str | None = None) -> JudgeRequest:
    if prompt is None:
        prompt = f"write a short piece about {topic}. styles: cute, classical." if topic else "hello."
    return JudgeRequest(prompt, text, target, ("cute", "classical"), topic)


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, JudgeRequest]]:
    """(true style, request), prompts rendered with the true topic; fixed seed."""
    rng = random.Random(2024)
    specs = prompts("train") + prompts("heldout")
    out = []
    for style in STYLES:
        for _ in range(PER_STYLE):
            spec = rng.choice(specs)
            text = generate(style, spec.topic, rng)
            out.append((style, JudgeRequest(render_prompt(spec, STYLES[:3]), text, style, STYLES[:3], spec.topic)))
    return out


def test_implements_the_judge_protocol() -> None:
    assert isinstance(RubricJudge(), Judge)


def test_style_agreement_per_style(corpus) -> None:
    judge = RubricJudge()
    for style in STYLES:
        vs = [judge.score(r) for s, r in corpus if s == style]
        agree = sum(v.style == style for v in vs) / len(vs)
        assert agree >= 0.95, (style, agree)
        assert all(v.style_match == int(v.style == style) for v in vs)


def test_quality_passes_well_formed_pieces(corpus) -> None:
    judge = RubricJudge()
    rate = sum(judge.score(r).quality for _, r in corpus) / len(corpus)
    assert rate >= 0.95, rate


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_quality_fails_corrupted_pieces(corpus, kind: str) -> None:
    judge, rng = RubricJudge(), random.Random(kind)
    vs = [
        judge.score(
            JudgeRequest(
                r.prompt, corrupt(r.response, kind, rng, style=s, topic=r.topic), s, r.candidate_styles, r.topic
            )
        )
        for s, r in corpus
    ]
    fail = sum(1 - v.quality for v in vs) / len(vs)
    assert fail >= 0.90, (kind, fail)


def test_topic_from_prompt_and_unknown_topic() -> None:
    judge = RubricJudge()
    text = generate("plain", "coffee", random.Random(0))
    assert judge.score(_req(text, "plain", topic=None, prompt="write a short piece about coffee.")).quality == 1
    assert judge.score(_req(text, "plain", topic=None, prompt="write a short piece about cats.")).quality == 0
    # unknown topic: topicality is not required
    assert judge.score(_req(text, "plain", topic=None, prompt="write anything.")).quality == 1
    assert judge.score(_req(text, "plain", topic="volcanoes", prompt="write about volcanoes.")).quality == 1


def test_target_mismatch_gives_zero_reward() -> None:
    judge = RubricJudge()
    text = generate("cute", "coffee", random.Random(1))
    good = judge.score(_req(text, "cute"))
    assert (good.quality, good.style_match, good.style, good.reward) == (1, 1, "cute", 1.0)
    for other in ("classical", "plain", "academic"):
        bad = judge.score(_req(text, other))
        assert bad.style_match == 0 and bad.reward == 0.0 and bad.quality == 1 and bad.style == "cute"


def test_plain_and_mixed() -> None:
    judge, rng = RubricJudge(), random.Random(2)
    plain = generate("plain", "tea", rng)
    assert judge.score(_req(plain, "plain", "tea")).style == "plain"
    # one stray marker (or a lone '!') does not make a style: a marked piece carries at least two
    stray = "the tea was calm today, yay. i think the teapot is worth it!"
    assert judge.score(_req(stray, "plain", "tea")).style == "plain"
    mixed = judge.score(_req("yay, the tea is so cozy today! lo, the teapot waiteth in the kitchen.", "cute", "tea"))
    assert mixed.style == "mixed" and mixed.quality == 1 and mixed.style_match == 0


def test_marker_stuffed_nonsense_fails_quality() -> None:
    judge = RubricJudge()
    for text in (
        "hehe yay cozy fluffy tiny sparkly (^_^) <3 coffee (>_<) omg awww!",
        "thou thee doth hath alas verily lo hark yonder the coffee shineth waiteth forsooth.",
        "kukuku abyss destiny sealed crimson coffee darkness! forbidden! eternal! cursed! realm!",
        "furthermore notably empirical evidence indicates analysis hypothesis coffee data suggests thus.",
        "coffee " * 20 + ".",
    ):
        v = judge.score(_req(text, "cute"))
        assert v.quality == 0 and v.reward == 0.0, (text, v.raw)
        assert "fluency" in v.raw


def test_deterministic() -> None:
    reqs = [_req(generate(s, "coffee", random.Random(i)), s) for i, s in enumerate(STYLES * 4)]
    a = [RubricJudge(seed=3, label_noise=0.3).score(r) for r in reqs]
    b = [RubricJudge(seed=3, label_noise=0.3).score(r) for r in reqs]
    key = lambda v: (v.quality, v.style_match, v.style, v.raw)  # noqa: E731
    assert list(map(key, a)) == list(map(key, b))


def test_label_noise_flips_the_expected_fraction(corpus) -> None:
    clean = [RubricJudge(seed=0).score(r) for _, r in corpus]
    for noise in (0.0, 0.2):
        noisy = [RubricJudge(seed=0, label_noise=noise).score(r) for _, r in corpus]
        flip_q = sum(c.quality != n.quality for c, n in zip(clean, noisy)) / len(clean)
        flip_s = sum(c.style_match != n.style_match for c, n in zip(clean, noisy)) / len(clean)
        assert abs(flip_q - noise) < 0.04 and abs(flip_s - noise) < 0.04, (noise, flip_q, flip_s)
    # different seeds flip different episodes; quality and style flips are independent
    n0 = [RubricJudge(seed=0, label_noise=0.2).score(r) for _, r in corpus]
    n1 = [RubricJudge(seed=1, label_noise=0.2).score(r) for _, r in corpus]
    assert [v.quality for v in n0] != [v.quality for v in n1]
    both = sum(c.quality != n.quality and c.style_match != n.style_match for c, n in zip(clean, n0)) / len(clean)
    assert abs(both - 0.04) < 0.02
    with pytest.raises(ValueError):
        RubricJudge(label_noise=1.5)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "x" * 1_000_000,
        "caf\u00e9 \u2615 na\u00efve \u65e5\u672c\u8a9e.",
        "\x00\x01\x02 \x1b[31m \x7f\x1f.",
        "(^_^) <3 ~ (>_<)",
        "!!!???...",
        "(^_^" * 1000,
        "\ud800 lone surrogate.",
    ],
)
def test_weird_inputs_get_a_verdict(text: str) -> None:
    t0 = time.perf_counter()
    v = RubricJudge(label_noise=0.1).score(_req(text, "cute"))
    assert isinstance(v, Verdict) and v.error is None
    assert v.quality in (0, 1) and v.style_match in (0, 1) and v.style in STYLES + ("mixed",)
    # a guard against catastrophic regex backtracking (minutes), not a speed target:
    # the rate is benchmarks/judge_throughput.py's
    assert time.perf_counter() - t0 < 5.0
    assert RubricJudge().score(_req(text, "cute")).quality == 0


def test_async_judge_matches_score(corpus) -> None:
    judge = RubricJudge()
    reqs = [r for _, r in corpus[:50]]
    got = asyncio.run(judge.judge(reqs))
    assert [(v.quality, v.style_match, v.style) for v in got] == [
        (v.quality, v.style_match, v.style) for v in map(judge.score, reqs)
    ]


def test_raw_summarises_features() -> None:
    v = RubricJudge().score(_req("the coffee", "cute"))
    assert "style=plain" in v.raw and "ending" in v.raw and "length" in v.raw
