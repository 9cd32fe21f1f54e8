"""The simulated world: generator, language, prompts, corruptions."""

from __future__ import annotations

import random
import string

import pytest

from testbed.world import (
    CORRUPTIONS,
    EMOTICONS,
    STYLES,
    TOPICS,
    PromptSpec,
    corrupt,
    generate,
    join_words,
    prompts,
    render_prompt,
    split_words,
    topic_of_prompt,
    vocabulary,
)
from testbed.world.language import (
    FINAL_PUNCT,
    compiled,
    count_words,
    proper_ending,
    repetition_problem,
    style_tokens,
    valid_bigrams,
)
from testbed.world.styles import COMMON, STYLE_SPECS
from testbed.world.topics import TOPIC_LEXICONS, TOPIC_SLOTS, topic_keywords

MARKED = tuple(s for s in STYLES if s != "plain")
_ALLOWED_CHARS = set(string.printable) - set("\t\n\r\x0b\x0c'-") - set(string.ascii_uppercase)


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str, str]]:
    """(style, topic, text): 300 pieces per style, fixed seed."""
    rng = random.Random(1234)
    out = []
    for style in STYLES:
        for _ in range(300):
            topic = rng.choice(TOPICS)
            out.append((style, topic, generate(style, topic, rng)))
    return out


def _rendered_prompts() -> list[str]:
    rng = random.Random(5)
    return [render_prompt(p, rng.sample(STYLES, rng.randint(1, 5))) for p in prompts("train") + prompts("heldout")]


def test_constants() -> None:
    assert STYLES == ("academic", "cute", "chuunibyou", "classical", "plain")
    assert CORRUPTIONS == ("shuffle", "truncate", "repeat", "off_topic")
    assert len(TOPICS) >= 30 and len(set(TOPICS)) == len(TOPICS)
    assert all(set(t) <= set(string.ascii_lowercase + " ") for t in TOPICS)
    for e in EMOTICONS:
        assert split_words(e) == [e] and not set(e) & set(".,!?;:")


def test_split_join_basics() -> None:
    assert split_words("yay, so cozy! (^_^)") == ["yay", ",", "so", "cozy", "!", "(^_^)"]
    assert split_words("what?! <3 ~") == ["what", "?", "!", "<3", "~"]
    assert split_words("") == [] and split_words("  \n ") == []
    assert join_words(["yay", ",", "so", "cozy", "!", "(^_^)"]) == "yay, so cozy! (^_^)"


def test_round_trip_generated_and_prompts(corpus) -> None:
    for _, _, text in corpus:
        assert join_words(split_words(text)) == text
    for p in _rendered_prompts():
        assert join_words(split_words(p)) == p


def test_pieces_are_well_formed(corpus) -> None:
    for _style, topic, text in corpus:
        toks = split_words(text)
        assert 15 <= count_words(toks) <= 40, text
        assert set(text) <= _ALLOWED_CHARS, text  # printable ASCII, lowercase, no ' or -
        assert proper_ending(toks), text
        assert repetition_problem(toks) is None, text
        assert topic_keywords(topic) & set(toks), text  # topicality
        assert sum(t in FINAL_PUNCT for t in toks) >= 2, text  # 2-3 sentences (some have two marks)


def test_vocabulary_covers_everything(corpus) -> None:
    vocab = vocabulary()
    assert vocab == sorted(set(vocab)) and len(vocab) < 5000
    v = set(vocab)
    assert set(STYLES) | set(EMOTICONS) | set(".,!?;:") <= v
    rng = random.Random(9)
    for style, topic, text in corpus:
        assert set(split_words(text)) <= v, text
        kind = rng.choice(CORRUPTIONS)
        assert set(split_words(corrupt(text, kind, rng, style=style, topic=topic))) <= v
    for p in _rendered_prompts():
        assert set(split_words(p)) <= v, p
    # and nothing in it the world cannot emit (the grammar's tokens are the vocabulary)
    assert set().union(*(style_tokens(s) for s in STYLES)) <= v


def test_generated_text_is_fully_fluent(corpus) -> None:
    bigrams = valid_bigrams()
    for _, _, text in corpus:
        toks = split_words(text)
        assert all(p in bigrams for p in zip(toks, toks[1:])), text


def test_at_least_10000_distinct_texts_per_style() -> None:
    for style in STYLES:
        rng = random.Random(77)
        texts = {generate(style, rng.choice(TOPICS), rng) for _ in range(12_000)}
        assert len(texts) >= 10_000, (style, len(texts))


def test_deterministic_for_a_seed() -> None:
    def draw(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [generate(s, t, rng) for s in STYLES for t in TOPICS[:5]]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_style_is_marked_early_and_markers_do_not_leak(corpus) -> None:
    for style in MARKED:
        markers = STYLE_SPECS[style].markers
        for other in STYLES:
            if other != style:
                assert not markers & style_tokens(other), (style, other, markers & style_tokens(other))
    for style, _, text in corpus:
        if style in MARKED:
            head = split_words(text)[:3]
            assert any(w in STYLE_SPECS[style].markers or w in EMOTICONS for w in head), text


def test_topic_keywords_are_unique_to_their_topic() -> None:
    style_words = {w for s in STYLES for w in style_tokens(s)} - {
        w for t in TOPICS for slot in TOPIC_SLOTS for p in TOPIC_LEXICONS[t][slot] for w in split_words(p)
    }
    for topic in TOPICS:
        kw = topic_keywords(topic)
        assert kw and not kw & style_words
        assert not kw & {w for v in COMMON.values() for p in v for w in p.split()}
        for other in TOPICS:
            if other != topic:
                other_words = {w for slot in TOPIC_SLOTS for p in TOPIC_LEXICONS[other][slot] for w in split_words(p)}
                assert not kw & other_words, (topic, other, kw & other_words)


def test_every_opener_names_the_topic() -> None:
    for style in STYLES:
        openers, _ = compiled(style)
        for tpl in openers:
            assert (True, "noun") in tpl, (style, tpl)


def test_prompt_splits() -> None:
    train, held = prompts("train"), prompts("heldout")
    assert prompts("train") == train  # deterministic
    assert 56 <= len(held) <= 72 and len(train) > 3 * len(held)
    assert not {p.prompt_id for p in train} & {p.prompt_id for p in held}
    assert len({p.prompt_id for p in train + held}) == len(train) + len(held)
    pair = lambda p: (p.request.replace(p.topic, "{topic}"), p.topic)  # noqa: E731
    assert not {pair(p) for p in train} & {pair(p) for p in held}
    assert {p.topic for p in train} == set(TOPICS)
    assert len({pair(p)[0] for p in train}) >= 4  # several request templates
    assert all(isinstance(p, PromptSpec) and p.topic in p.request for p in train + held)
    with pytest.raises(ValueError):
        prompts("test")


def test_topic_of_prompt_inverts_render_prompt() -> None:
    spec = prompts("train")[0]
    rendered = render_prompt(spec, ["academic", "cute", "chuunibyou"])
    assert rendered.endswith(" styles: academic, cute, chuunibyou.") and rendered.startswith(spec.request)
    for p in prompts("train") + prompts("heldout"):
        for cands in (STYLES, ("plain",)):
            assert topic_of_prompt(render_prompt(p, cands)) == p.topic
    assert topic_of_prompt("Tell me something about THE BUS RIDE please") == "the bus ride"
    assert topic_of_prompt("hello there. styles: cute.") is None
    assert topic_of_prompt("") is None


def test_corruptions(corpus) -> None:
    rng = random.Random(11)
    for style, topic, text in corpus[::50]:
        for kind in CORRUPTIONS:
            bad = corrupt(text, kind, random.Random(1), style=style, topic=topic)
            assert bad != text
            assert bad == corrupt(text, kind, random.Random(1), style=style, topic=topic)  # deterministic
            toks = split_words(bad)
            if kind == "truncate":
                assert not proper_ending(toks) and len(toks) < len(split_words(text))
            if kind == "shuffle":
                assert sorted(toks) == sorted(split_words(text))
            if kind == "repeat":
                assert repetition_problem(toks) is not None
            if kind == "off_topic":
                assert not topic_keywords(topic) & set(toks)
    with pytest.raises(ValueError):
        corrupt("a b c.", "nonsense", rng, style="plain", topic="coffee")
    with pytest.raises(ValueError):
        generate("gothic", "coffee", rng)
