"""What the rubric's two modes share (judges/rubric.py's `world`, judges/open_world/judge.py's `open`):
the default dominance of the top style, and the label noise that flips a verdict."""

from __future__ import annotations

import hashlib
import struct

DOMINANCE = 0.6  # share of marker mass the top style needs, else "mixed"


def _noise(seed: int, prompt: str, response: str) -> tuple[float, float]:
    """Two uniforms in [0, 1) from a hash, so noise is a pure function of its inputs."""
    h = hashlib.blake2b(f"{seed}\x00{prompt}\x00{response}".encode("utf-8", "replace"), digest_size=16).digest()
    a, b = struct.unpack("<QQ", h)
    return a / 2**64, b / 2**64


def label_noise_flips(
    seed: int, rate: float, prompt: str, response: str, quality: int, style_match: int
) -> tuple[int, int, str]:
    """(quality, style_match, note): each flipped with probability `rate`, decided by the hash of
    (seed, prompt, response), so an imperfect judge is still a pure function (both modes use it)."""
    note = ""
    if rate > 0.0:
        u_q, u_s = _noise(seed, prompt, response)
        if u_q < rate:
            quality, note = 1 - quality, note + " flip_q"
        if u_s < rate:
            style_match, note = 1 - style_match, note + " flip_s"
    return quality, style_match, note
