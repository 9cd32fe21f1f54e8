"""OpenRLHF's remote reward on a scenario (testbed/integrations/remote_reward.py), served by
`python -m judges.server --scenario ... --run-dir ...` beside its OpenAI-compatible route and
driven over real HTTP with the request and reply shapes of OpenRLHF's own code
(openrlhf/utils/agent.py `_fetch_rewards_via_http`, openrlhf/cli/serve_rm.py): the server's
clock crosses the scenario's switches, every query is judged at its clock's target, and the run
directory it writes is one that `analysis.report` reads."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from judges.rubric import RubricJudge
from testbed.integrations.remote_reward import RemoteRewardError, response_of
from testbed.store import read_table
from testbed.types import JudgeRequest
from testbed.world import generate, prompts, render_prompt

ROOT = Path(__file__).resolve().parent.parent
FLAKY = '''
from judges.rubric import RubricJudge
from testbed.types import Verdict


class Flaky:
    """The rubric, except that it fails on a response that says FAIL (an outage, not a zero)."""

    def __init__(self):
        self.rubric = RubricJudge()

    async def judge(self, requests):
        return [Verdict.failed("judge down") if "FAIL" in r.response else self.rubric.score(r) for r in requests]
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The server on tiny.yaml's schedule over 40 episodes (switches at 16 and 28), its judge the
    rubric that fails on FAIL; yields (base url, run directory, the scenario's schedule)."""
    tmp = tmp_path_factory.mktemp("remote")
    (tmp / "flaky_judge.py").write_text(FLAKY)
    data = yaml.safe_load((ROOT / "tests/data/tiny.yaml").read_text())
    data.update(judge={"type": "flaky_judge:Flaky"}, budget={"episodes": 40}, seeds=[3])
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(data))
    run_dir = tmp / "runs" / "openrlhf"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)])}
    cmd = [sys.executable, "-m", "judges.server", "--port", "0", "--scenario", str(tmp / "scenario.yaml")]
    proc = subprocess.Popen(
        [*cmd, "--run-dir", str(run_dir), "--arm", "openrlhf", "--exit-with-parent"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=120)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"the server did not start: {proc.stderr.read()[-2000:]}")
    assert "remote_rm=http://127.0.0.1:" in first and f"run_dir={run_dir}" in first
    base = first.split("remote_rm=")[1].split("/get_reward")[0]
    from testbed.scenario.schema import load_scenario

    schedule = load_scenario(ROOT / "tests/data/tiny.yaml", ["budget.episodes=40"]).schedule_object()  # the same
    yield base, run_dir, schedule, proc
    if proc.poll() is None:
        proc.kill()


def openrlhf_body(rng: random.Random, t0: int, n: int, schedule, fail: set[int] = frozenset()) -> tuple[dict, list]:
    """A request as OpenRLHF's client sends it: query = the chat-templated prompt + the response +
    the end token (decoded with special tokens kept), the prompt, and the label (the prompt id).
    Half the pieces are written in the target of their clock, half in another style."""
    body: dict = {"query": [], "prompts": [], "labels": []}
    expected = []
    for i in range(n):
        t = t0 + i
        target = schedule.target(t)
        spec = rng.choice(prompts("train"))
        style = target.style if i % 2 == 0 else next(s for s in target.candidates if s != target.style)
        piece = "FAIL" if i in fail else generate(style, spec.topic, rng)
        text = render_prompt(spec, target.candidates)
        prompt = f"<bos> {text} <sep>"  # the exported policy's chat template, as OpenRLHF applies it
        body["query"].append(f"{prompt} {piece} <eos>")
        body["prompts"].append(prompt)
        body["labels"].append(spec.prompt_id)
        request = JudgeRequest(text, piece, target.style, target.candidates, spec.topic)
        expected.append(None if i in fail else RubricJudge().score(request).reward)
    return body, expected


def test_openrlhf_requests_are_judged_on_the_servers_clock_across_the_switches(served):
    base, run_dir, schedule, proc = served
    rng = random.Random(0)
    with httpx.Client(base_url=base, timeout=60) as http:
        assert http.get("/drift").json()["clock"] == 0
        assert http.get("/v1/models").status_code == 200  # the OpenAI-compatible route, beside it
        t = 0
        for n in (8, 8, 8, 8):  # 32 episodes: both switches (16, 28) inside
            body, expected = openrlhf_body(rng, t, n, schedule)
            reply = http.post("/get_reward", json=body)
            assert reply.status_code == 200, reply.text
            got = reply.json()
            assert got["rewards"] == expected and got["scores"] == expected  # the target of each query's clock
            assert got["extra_logs"]["clock"] == [float(t + i) for i in range(n)]
            assert set(got["extra_logs"]) == {"r_quality", "r_style", "clock"}
            t += n
        assert 0 < sum(r for r in expected if r) < n  # the pieces in the target pass, the others do not
        status = http.get("/drift").json()
        assert status["clock"] == 32 and status["target"] == "classical" and status["switch_points"] == [16, 28]

        # a query the judge cannot score is null, never 0, and does not move the clock
        body, expected = openrlhf_body(rng, 32, 4, schedule, fail={1})
        got = http.post("/get_reward", json=body).json()
        assert got["rewards"][1] is None and got["rewards"] == expected
        assert http.get("/drift").json()["clock"] == 35
        # every query failed: 503, which OpenRLHF's client retries
        body, _ = openrlhf_body(rng, 35, 2, schedule, fail={0, 1})
        reply = http.post("/get_reward", json=body)
        assert reply.status_code == 503 and "judge down" in reply.json()["error"]["message"]
        assert http.get("/drift").json()["clock"] == 35

        # shapes OpenRLHF would never send get a 400 that says what is wrong
        assert http.post("/get_reward", content=b"{not json").status_code == 400
        bad = http.post("/get_reward", json={"query": ["a b"], "prompts": ["c"], "labels": [None]})
        assert bad.status_code == 400 and "does not start with its prompt" in bad.json()["error"]["message"]
        bad = http.post("/get_reward", json={"query": ["p r"], "prompts": ["p"], "labels": ["no-such-prompt"]})
        assert bad.status_code == 400 and "labels[0]" in bad.json()["error"]["message"]
        assert http.post("/get_reward", json={"query": ["p r"], "prompts": []}).status_code == 400
        assert http.get("/stats").json()["rewards"] == 10

    proc.send_signal(signal.SIGINT)  # a graceful stop writes the manifest and the last rows
    assert proc.wait(timeout=60) == 0
    episodes = read_table(run_dir, "episodes")
    judged = episodes[episodes["judge_error"].isna()].sort_values("t")
    assert judged["t"].tolist() == list(range(35)) and (judged["arm"] == "openrlhf").all()
    assert (judged["target_style"] == judged["t"].map(lambda t: schedule.target(t).style)).all()
    assert len(episodes) == 38 and episodes["judge_error"].eq("judge down").sum() == 3  # stored, not trained
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["switch_points"] == [16, 28]
    assert manifest["arms"]["openrlhf"]["3"]["episodes"] == 35

    from analysis.report import report

    report(run_dir, figures=False)
    summary = (run_dir / "summary.md").read_text()
    assert "cute -> chuunibyou @ 16" in summary and "chuunibyou -> classical @ 28" in summary


def test_the_response_is_what_follows_the_prompt_less_its_end_markers():
    assert response_of("<bos> write. <sep> a piece . <eos><pad><pad>", "<bos> write. <sep>", "q") == "a piece ."
    assert response_of("<bos>  write.  <sep> a piece .", "<bos> write. <sep>", "q") == "a piece ."  # spacing
    with pytest.raises(RemoteRewardError, match="q: query does not start with its prompt"):
        response_of("something else", "<bos> write. <sep>", "q")
