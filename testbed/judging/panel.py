"""A scenario's judges behind one Judge: each request goes to the judge it names.

A drift schedule that changes the judge (`judge_at(t)`, testbed/protocols.py) names, for every
clock, which of the scenario's judges scores that clock's episodes: "default" (the scenario's
`judge`) or a key of its `judges:`. The env puts that name on each request (`JudgeRequest.judge`);
the panel sends each request to its judge, one call per judge per batch, in the batch's order, and
counts the verdicts each judge gave (`calls_by_judge`: the `judge_calls_<name>` columns of
`updates.parquet`; every call, training, evaluation, reference and warm-up alike).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from testbed.protocols import DEFAULT_JUDGE, Judge
from testbed.types import JudgeRequest, Verdict


class JudgePanel:
    """`members`: name -> judge, DEFAULT_JUDGE among them (it scores requests that name none)."""

    def __init__(self, members: Mapping[str, Judge]) -> None:
        if DEFAULT_JUDGE not in members:
            raise ValueError(f"a judge panel needs its {DEFAULT_JUDGE!r} judge, got {sorted(members)}")
        self.members = dict(members)
        self.judge_names = frozenset(self.members)
        self.calls: Counter[str] = Counter()

    async def judge(self, requests: list[JudgeRequest]) -> list[Verdict]:
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            name = request.judge or DEFAULT_JUDGE
            if name not in self.members:
                raise ValueError(f"request {i} names judge {name!r}; the scenario's judges are {sorted(self.members)}")
            groups.setdefault(name, []).append(i)
        answers = await asyncio.gather(
            *(self.members[name].judge([requests[i] for i in idx]) for name, idx in groups.items())
        )
        verdicts: list[Verdict | None] = [None] * len(requests)
        for (name, idx), got in zip(groups.items(), answers):
            got = list(got)
            if len(got) != len(idx):
                raise RuntimeError(f"judge {name!r} returned {len(got)} verdicts for {len(idx)} requests")
            self.calls[name] += len(idx)
            for i, verdict in zip(idx, got):
                verdicts[i] = verdict
        return [v for v in verdicts if v is not None]

    def calls_by_judge(self) -> dict[str, int]:
        """Verdicts asked of each judge so far (every member, 0 for one not asked yet)."""
        return {name: int(self.calls[name]) for name in self.members}

    def stats(self) -> dict[str, Any]:
        """The members' own counters (the LLM judge's): the default judge's under their own names,
        as a run without a panel writes them; another judge's prefixed with its name."""
        out: dict[str, Any] = {}
        for name, member in self.members.items():
            stats = getattr(member, "stats", None)
            if callable(stats):
                out.update({k if name == DEFAULT_JUDGE else f"{name}_{k}": v for k, v in stats().items()})
        return out

    def close(self) -> None:
        for member in self.members.values():
            closer = getattr(member, "close", None)
            if callable(closer):
                closer()

    def __repr__(self) -> str:
        return f"JudgePanel({', '.join(self.members)})"
