"""The data-parallel context: "this update is one shard of a bigger batch, with weight w".

It lives on testbed's ground floor so that whichever runtime trains shards (the Ray learner,
testbed/runtimes/ray/learner_worker.py) can set it and the trainers can read it
(trainers/data_parallel.py) without either knowing the other: testbed never imports `trainers/`
(docs/architecture.md, "Boundaries"), and no trainer imports a runtime. No torch, no Ray here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_WEIGHT: ContextVar[float | None] = ContextVar("shard_weight", default=None)


@contextmanager
def shard_weight(weight: float) -> Iterator[None]:
    """Run a `trainer.update(shard)` as one data-parallel shard: `weight` = the shard's action
    tokens / the whole batch's (so the weighted token-mean gradients sum to the batch's)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"a shard weight is a share of the batch's action tokens, got {weight}")
    token = _WEIGHT.set(float(weight))
    try:
        yield
    finally:
        _WEIGHT.reset(token)


def current_shard_weight() -> float | None:
    """The weight set by the innermost `shard_weight`, or None outside one."""
    return _WEIGHT.get()
