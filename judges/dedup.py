"""Planning one batch of judge requests: which are answered by the cache, which must be judged,
and which are copies of another request in the same batch (judged once, the verdict shared)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BatchPlan", "plan_batch"]


@dataclass
class BatchPlan:
    hits: dict[int, dict[str, Any]] = field(default_factory=dict)  # request index -> cached value
    leaders: dict[str, int] = field(default_factory=dict)  # key -> the index that is judged
    followers: dict[str, list[int]] = field(default_factory=dict)  # key -> later indices sharing it

    def copies(self, key: str) -> list[int]:
        return self.followers.get(key, [])


def plan_batch(keys: Sequence[str], cached: Mapping[str, dict[str, Any]]) -> BatchPlan:
    """The first request of each uncached key leads; identical keys after it follow."""
    plan = BatchPlan()
    for i, key in enumerate(keys):
        hit = cached.get(key)
        if hit is not None:
            plan.hits[i] = hit
        elif key in plan.leaders:
            plan.followers.setdefault(key, []).append(i)
        else:
            plan.leaders[key] = i
    return plan
