"""Where the testbed keeps what it can rebuild: the SFT policy, pretrained critics, judge verdicts.

One function, so every cache agrees on the folder. An empty ``TESTBED_CACHE`` counts as unset
(``TESTBED_CACHE= python ...`` must not put the cache in the current directory).

`source_fingerprint` goes into the keys of cached models: a change to the code that computes them
(even one that only moves float rounding) must retrain, not reuse what older code built.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

__all__ = ["cache_dir", "check_directory", "source_fingerprint"]

ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """``$TESTBED_CACHE`` if it is set and not empty, else ``~/.cache/testbed``. Not created here."""
    value = os.environ.get("TESTBED_CACHE", "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "testbed"


@cache
def source_fingerprint(*parts: str, root: Path = ROOT) -> str:
    """A hash of the Python sources under `parts` (paths relative to `root`: files or packages),
    by relative path and content, so it is the same in every clone of one commit."""
    digest = hashlib.sha256()
    for part in parts:
        path = root / part
        if not path.exists():
            raise FileNotFoundError(f"source_fingerprint: no {path}")
        for file in sorted([path] if path.is_file() else path.rglob("*.py")):
            digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


WEIGHTS = ("*.safetensors", "*.bin")


def check_directory(path: str | Path) -> Path:
    """The directory, if it looks like a checkpoint (config.json and weights); else a clear error."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"policy.checkpoint: no such directory: {directory}")
    if not (directory / "config.json").exists():
        raise FileNotFoundError(
            f"policy.checkpoint: {directory} has no config.json (not a transformers checkpoint "
            "directory; write one with save_pretrained or testbed export)"
        )
    if not any(any(directory.glob(w)) for w in WEIGHTS):
        raise FileNotFoundError(f"policy.checkpoint: {directory} has no weights (*.safetensors or *.bin)")
    return directory
