"""Per-episode sampling streams: common random numbers across the arms of a seed.

With `sampling.streams: episode` the uniform that picks each sampled token comes from a
counter-based generator (Philox 4x64, as numpy implements it) keyed by the episode's stream id and
counting over (turn, token position), instead of the one CPU generator the whole run draws from.
The stream id is the env's (`testbed.envs.episode.stream_id`: the seed, the kind of episode and its
clock), so two arms of a seed draw the SAME uniforms for the same episode, token by token, whatever
the batch layout, the rows that finished early, the runtime or the process. Their sampled
responses then differ only where their policies differ: the paired difference between arms
measures the trainers rather than luck (the variance-reduction technique of simulation studies
known as common random numbers). Philox is counter-based, so a stream needs no state: the same
(key, counter) gives the same numbers on any machine, and no checkpoint has to save it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["episode_uniforms", "request_seed"]


def episode_uniforms(streams: Sequence[int], turns: Sequence[int], steps: int) -> torch.Tensor:
    """[B, steps] float64 uniforms in [0, 1): row i is stream `streams[i]`'s uniforms for the
    tokens 0..steps-1 of turn `turns[i]`. Philox key = the stream id; the turn goes in the
    counter's top word, so turns never overlap (a turn draws far fewer than 2**192 numbers)."""
    rows = [
        np.random.Generator(np.random.Philox(key=int(stream), counter=[0, 0, 0, int(turn)])).random(steps)
        for stream, turn in zip(streams, turns)
    ]
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, steps, dtype=torch.float64)


def request_seed(stream: int, turn: int) -> int:
    """A per-request seed for an engine that seeds each request itself (vLLM): a function of the
    stream and the turn only, in [0, 2**31 - 1)."""
    return int(np.random.Generator(np.random.Philox(key=int(stream), counter=[0, 0, 1, int(turn)])).integers(2**31 - 1))
