"""World settings (testbed/world/rules.py): each changes the reward the way it says, and only when on."""

import asyncio
import random

import pytest

from judges.rubric import RubricJudge
from testbed.envs.defaults import default_schedule
from testbed.envs.style_shift import StyleShiftEnv
from testbed.scenario.schema import ScenarioError, parse_scenario
from testbed.types import JudgeRequest
from testbed.world import TOPICS, generate, prompts, render_prompt, split_words
from testbed.world.language import count_words
from testbed.world.rules import HardTopics, NoisyTopics, WorldRules, WorldRulesJudge, chosen, wrap
from testbed.world.topics import topic_keywords


def verdicts(judge, requests):
    return asyncio.run(judge.judge(requests))


def request(topic: str, response: str, style: str = "cute") -> JudgeRequest:
    spec = next(s for s in prompts("train") if s.topic == topic)
    return JudgeRequest(
        render_prompt(spec, ["academic", "cute", "chuunibyou"]),
        response,
        style,
        ("academic", "cute", "chuunibyou"),
        topic,
    )


def pieces(n: int, seed: int = 0):
    rng = random.Random(seed)
    return [(t, generate("cute", t, rng)) for t in (rng.choice(TOPICS) for _ in range(n))]


def test_a_share_picks_exactly_that_many_names_and_a_larger_share_a_superset():
    names = tuple(f"n{i}" for i in range(36))
    half, quarter = chosen(names, 0.5, "x"), chosen(names, 0.25, "x")
    assert len(half) == 18 and len(quarter) == 9 and quarter <= half
    assert chosen(names, 0.5, "x") == half and chosen(names, 0.5, "y") != half  # fixed per salt
    assert chosen(names, 0.0, "x") == frozenset() and len(chosen(names, 1.0, "x")) == 36


def test_rules_that_are_off_leave_the_judge_as_it_is():
    judge = RubricJudge()
    assert wrap(judge, WorldRules()) is judge
    assert wrap(judge, WorldRules(noisy_topics=NoisyTopics(share=0.5, rate=0.0))) is judge
    assert isinstance(wrap(judge, WorldRules(hard_topics=HardTopics(share=0.5))), WorldRulesJudge)


def test_hard_topics_demand_more_topic_nouns_and_only_there():
    rules = WorldRules(hard_topics=HardTopics(share=0.5, min_topic_words=2))
    hard = rules.hard_topic_set()
    plain, ruled = RubricJudge(), WorldRulesJudge(RubricJudge(), rules)
    reqs = [request(t, text) for t, text in pieces(400)]
    before, after = verdicts(plain, reqs), verdicts(ruled, reqs)
    failed_by_rule = 0
    for req, b, a in zip(reqs, before, after):
        nouns = sum(w in topic_keywords(req.topic) for w in split_words(req.response.lower()))
        if req.topic not in hard or nouns >= 2:
            assert (a.quality, a.style_match) == (b.quality, b.style_match), req
        else:
            assert a.quality == 0 and "hard_topic" in a.reasons and "world=hard:hard_topic" in a.raw
            failed_by_rule += b.quality
    assert failed_by_rule > 50  # the demand bites: most passing pieces on hard topics have one noun

    # the expected reward now depends on the topic: lower on the hard half
    def rate(vs, rs, inside):
        return sum(v.quality for v, r in zip(vs, rs) if (r.topic in hard) == inside) / max(
            1, sum((r.topic in hard) == inside for r in rs)
        )

    assert rate(after, reqs, True) < 0.5 * rate(after, reqs, False)


def test_hard_topics_can_demand_length():
    rules = WorldRules(hard_topics=HardTopics(share=1.0, min_words=28))
    out = verdicts(WorldRulesJudge(RubricJudge(), rules), [request(t, x) for t, x in pieces(200, seed=1)])
    base = verdicts(RubricJudge(), [request(t, x) for t, x in pieces(200, seed=1)])
    for (_, text), a, b in zip(pieces(200, seed=1), out, base):
        long_enough = count_words(split_words(text.lower())) >= 28
        assert a.quality == (b.quality and long_enough)
        assert ("hard_words" in a.reasons) == (not long_enough)


def test_noisy_topics_flip_verdicts_at_their_rate_there_only_and_repeatably():
    rules = WorldRules(noisy_topics=NoisyTopics(share=0.5, rate=0.3))
    noisy = rules.noisy_topic_set()
    reqs = [request(t, x) for t, x in pieces(2000, seed=2)]
    base, out = verdicts(RubricJudge(), reqs), verdicts(WorldRulesJudge(RubricJudge(), rules), reqs)
    flips = [(a.quality != b.quality, a.style_match != b.style_match) for a, b in zip(out, base)]
    inside = [f for f, r in zip(flips, reqs) if r.topic in noisy]
    outside = [f for f, r in zip(flips, reqs) if r.topic not in noisy]
    assert not any(q or s for q, s in outside)
    q_rate = sum(q for q, _ in inside) / len(inside)
    s_rate = sum(s for _, s in inside) / len(inside)
    assert 0.25 < q_rate < 0.35 and 0.25 < s_rate < 0.35
    again = verdicts(WorldRulesJudge(RubricJudge(), rules), reqs)
    assert [(v.quality, v.style_match) for v in again] == [(v.quality, v.style_match) for v in out]
    # a gold judge takes the hard topics but never the noise
    gold = WorldRulesJudge(RubricJudge(), rules, noise=False)
    assert [(v.quality, v.style_match) for v in verdicts(gold, reqs)] == [(v.quality, v.style_match) for v in base]


def test_failed_verdicts_pass_through_and_stats_reach_the_wrapped_judge():
    class Down:
        calls = 0

        async def judge(self, requests):
            from testbed.types import Verdict

            return [Verdict.failed("down") for _ in requests]

        def stats(self):
            return {"calls": 7}

    ruled = WorldRulesJudge(
        Down(),
        WorldRules(hard_topics=HardTopics(share=1.0, min_topic_words=3), noisy_topics=NoisyTopics(share=1.0, rate=0.5)),
    )
    out = verdicts(ruled, [request(t, x) for t, x in pieces(20)])
    assert all(v.error == "down" and v.quality == 0 for v in out)
    assert ruled.stats() == {"calls": 7}


def test_prompt_forms_that_do_not_follow_the_schedule_keep_the_first_candidate_list():
    schedule = default_schedule()  # the last switch changes the candidate list
    last = schedule.switch_points()[-1]
    specs = prompts("train")
    judge = RubricJudge()
    follow = StyleShiftEnv(judge, schedule, specs)
    half = StyleShiftEnv(judge, schedule, specs, candidate_change_share=0.5)
    first, after = schedule.target(0).candidates, schedule.target(last).candidates
    assert tuple(first) != tuple(after)
    kept = 0
    for a, b in zip(follow.eval_starts(specs, last), half.eval_starts(specs, last)):
        assert a.target.candidates == tuple(after) and a.target.style == b.target.style
        if b.target.candidates == tuple(first):
            kept += 1
            assert b.target.style not in b.target.candidates and "classical" not in b.prompt_text.split("styles:")[1]
        else:
            assert b.prompt_text == a.prompt_text
    assert 0.35 < kept / len(specs) < 0.65
    # before any change of list, every prompt is the same either way
    assert [s.prompt_text for s in half.eval_starts(specs, 0)] == [s.prompt_text for s in follow.eval_starts(specs, 0)]
    # the same prompt keeps the same list when judged at a later clock
    start = half.eval_starts(specs[:50], last)
    assert [half.retarget(s, last + 1).target.candidates for s in start] == [s.target.candidates for s in start]


def scenario_data(**world):
    return {
        "name": "w",
        "schedule": {
            "type": "piecewise",
            "args": {"phases": [{"style": "cute", "start": 0.0, "end": 1.0, "candidates": ["cute", "academic"]}]},
        },
        "arms": [{"name": "rm", "type": "running_mean"}],
        "budget": {"episodes": 64},
        "world": world,
    }


def test_world_settings_are_validated_with_the_field_named():
    assert parse_scenario(scenario_data(hard_topics={"share": 0.5, "min_topic_words": 2})).world.rules().active
    for bad, field in [
        ({"hard_topics": {"share": 1.5}}, "world.hard_topics.share"),
        ({"noisy_topics": {"share": 0.5, "rate": 0.9}}, "world.noisy_topics.rate"),
        ({"noisy_topics": {"shares": 0.5}}, "world.noisy_topics.shares"),
        ({"candidate_change_share": -0.1}, "world.candidate_change_share"),
    ]:
        with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
            parse_scenario(scenario_data(**bad))


def test_the_rubric_can_be_made_lenient_and_refuses_unknown_checks():
    lenient = RubricJudge(checks=["length", "ending"], dominance=0.0)
    strict = RubricJudge()
    stuffed = "the cute little bunny sparkle sparkle sparkle uwu uwu fluffy fluffy hehe hehe !"
    req = request(TOPICS[0], stuffed)
    s, lax = strict.score(req), lenient.score(req)
    assert s.reward == 0 and lax.reward == 1.0, (s.raw, lax.raw)
    for text_topic, text in pieces(300, seed=4):  # lenient never rewards less than strict
        r = request(text_topic, text)
        assert lenient.score(r).reward >= strict.score(r).reward
    with pytest.raises(ValueError, match="checks"):
        RubricJudge(checks=["fluency", "grammar"])
    with pytest.raises(ValueError, match="dominance"):
        RubricJudge(dominance=1.5)
