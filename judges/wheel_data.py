"""Data files that ship inside an installed wheel (symspellpy's word counts, lemminflect's inflection
tables), found without importing the package: only its files are read."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(package: str, needed_for: str) -> Path:
    """The installed `package`'s folder; a clear error naming it when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed (pip install {package}): {needed_for}")
    return Path(next(iter(spec.submodule_search_locations)))
