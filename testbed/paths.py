"""Where the testbed keeps what it can rebuild: the SFT policy, pretrained critics, judge verdicts.

One function, so every cache agrees on the folder. An empty ``TESTBED_CACHE`` counts as unset
(``TESTBED_CACHE= python ...`` must not put the cache in the current directory).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$TESTBED_CACHE`` if it is set and not empty, else ``~/.cache/testbed``. Not created here."""
    value = os.environ.get("TESTBED_CACHE", "")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "testbed"
