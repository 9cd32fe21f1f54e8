"""A scenario's drifting reward as a remote reward model in the form OpenRLHF's `--remote_rm_url`
calls, served by `python -m judges.server --scenario FILE --run-dir DIR` at `POST /get_reward`
beside its OpenAI-compatible route. The server owns the clock: every query is judged at the next
clock value, against the target and by the judge in force there, and written as a run writes its
episode rows, so `python -m analysis.report DIR` reads what the outside trainer did.

The shapes are OpenRLHF's own (OpenRLHF/OpenRLHF at 3c3be62): its client,
`openrlhf/utils/agent.py` (`SingleTurnAgentExecutor._fetch_rewards_via_http`), posts

    {"query": [prompt + response, ...], "prompts": [prompt, ...], "labels": [label, ...]}

(`query` decoded with the special tokens kept), and its server, `openrlhf/cli/serve_rm.py`,
answers `{"rewards": [...], "scores": [...], "extra_logs": {name: [...]}}`, one value per query.
Here a query's response is what follows its prompt, less trailing end-of-text markers; its
label, where given, is the world's prompt id (`prompt_id` of a dataset written by
`DriftSession.prompt_rows`), else the topic is read from the prompt. `scores` repeat the rewards
(r in {0, 1}: OpenRLHF's dynamic filtering reads them); `extra_logs` carry r_quality, r_style and
the clock. A query the judge could not score is not a zero: its reward is null, and a request none
of whose queries could be scored gets HTTP 503 (OpenRLHF's client tries again), the failed
episodes stored and counted as a run stores them, the clock not moved by them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from testbed.integrations.session import DriftSession

# what a decoder leaves after a response when it keeps special tokens (the testbed policy's, ChatML's, Llama's, GPT-2's)
END_MARKERS = ("<eos>", "<pad>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
PROMPT_MARKERS = ("<bos>", "<sep>", "<s>")


class RemoteRewardError(ValueError):
    """A request that cannot be answered: `status` 400 (its shape) or 503 (the judge failed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def response_of(query: str, prompt: str, where: str) -> str:
    """The response inside `query` (= prompt + response + end markers): what follows the prompt,
    compared as written or, where a tokenizer's round trip changed the spacing, word by word."""
    if query.startswith(prompt):
        response = query[len(prompt) :].strip()
    elif (words := " ".join(query.split())).startswith(" ".join(prompt.split())):
        response = words[len(" ".join(prompt.split())) :].strip()
    else:
        raise RemoteRewardError(400, f"{where}: query does not start with its prompt (prompts[i]): {query[:60]!r}")
    while response.endswith(END_MARKERS):
        response = response[: -len(next(m for m in END_MARKERS if response.endswith(m)))].rstrip()
    return response


def clean_prompt(prompt: str) -> str:
    """The prompt's text without the markers a chat template wraps it in."""
    for marker in PROMPT_MARKERS + END_MARKERS:
        prompt = prompt.replace(marker, " ")
    return " ".join(prompt.split())


class RemoteReward:
    """`await reward(body) -> reply`, one request at a time in arrival order (the clock's order)."""

    def __init__(self, session: DriftSession) -> None:
        self.session = session
        self.lock = asyncio.Lock()

    @classmethod
    def open(
        cls,
        scenario: str | Path,
        run_dir: str | Path,
        *,
        arm: str = "openrlhf",
        seed: int | None = None,
        overrides: list[str] | None = None,
    ) -> RemoteReward:
        return cls(DriftSession(scenario, run_dir, arm=arm, seed=seed, overrides=overrides))

    def parse(self, body: Any) -> tuple[list[str], list[str], list[str | None]]:
        """(prompt texts, responses, prompt ids) of an OpenRLHF request body, or RemoteRewardError(400)."""
        if not isinstance(body, dict):
            raise RemoteRewardError(400, "the body must be a JSON object with query, prompts and labels")
        queries, prompts, labels = body.get("query"), body.get("prompts"), body.get("labels")
        if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
            raise RemoteRewardError(400, "query: a non-empty list of strings (prompt + response) is needed")
        if (
            not isinstance(prompts, list)
            or len(prompts) != len(queries)
            or not all(isinstance(p, str) for p in prompts)
        ):
            raise RemoteRewardError(400, f"prompts: a list of {len(queries)} strings, one per query, is needed")
        labels = [None] * len(queries) if labels is None else labels
        if not isinstance(labels, list) or len(labels) != len(queries):
            raise RemoteRewardError(400, f"labels: a list of {len(queries)} labels (the world's prompt ids) or none")
        ids: list[str | None] = []
        for i, label in enumerate(labels):
            if label in (None, "") or (isinstance(label, str) and label in self.session.specs):
                ids.append(label or None)
            else:
                raise RemoteRewardError(400, f"labels[{i}]: {str(label)[:60]!r} is not one of the world's prompt ids")
        responses = [response_of(q, p, f"query[{i}]") for i, (q, p) in enumerate(zip(queries, prompts))]
        return [clean_prompt(p) for p in prompts], responses, ids

    async def __call__(self, body: Any) -> dict[str, Any]:
        texts, responses, ids = self.parse(body)
        async with self.lock:
            t0 = self.session.clock
            verdicts = await self.session.ajudge(texts, responses, ids)
        if all(v.error is not None for v in verdicts):
            raise RemoteRewardError(503, f"the judge failed on every query: {verdicts[-1].error}")
        rewards = [None if v.error is not None else v.reward for v in verdicts]
        clocks = self.session.env.episode_clocks(t0, verdicts)
        return {
            "rewards": rewards,
            "scores": rewards,
            "extra_logs": {
                "r_quality": [None if v.error else float(v.quality) for v in verdicts],
                "r_style": [None if v.error else float(v.style_match) for v in verdicts],
                "clock": [float(t) for t in clocks],
            },
        }

    def status(self) -> dict[str, Any]:
        """The clock, the target and judge in force now, the switches (GET /drift)."""
        s = self.session
        now = min(s.clock, s.budget - 1)
        pick = getattr(s.schedule, "judge_at", None)
        return {
            "clock": s.clock,
            "budget": s.budget,
            "target": s.schedule.target(now).style,
            "judge": pick(now) if callable(pick) else "default",
            "switch_points": list(s.schedule.switch_points()),
            "run_dir": str(s.store.root),
        }

    def close(self) -> None:
        self.session.close()
