"""The optional parts of the package and the pip extra that installs each (pyproject.toml's
[project.optional-dependencies]). A part whose packages are missing fails on import with the
command that installs them, never with a bare "No module named ...".
"""

from __future__ import annotations

import importlib.util
import sys


class MissingExtra(ImportError):
    """An optional part was asked for without its extra; the message names the pip command."""


def install_command(extra: str) -> str:
    return f"pip install 'testbed[{extra}]'"


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """Those of `modules` that cannot be imported here. Looked up, not imported: importing
    litellm takes seconds, and the LLM judge imports it on first use."""
    missing = []
    for name in modules:
        if name in sys.modules:
            if sys.modules[name] is None:  # blocked on purpose (`sys.modules[name] = None`)
                missing.append(name)
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def require_extra(extra: str, part: str, modules: tuple[str, ...]) -> None:
    """Raise MissingExtra naming `extra` if any of `modules` is not installed."""
    missing = missing_modules(modules)
    if missing:
        raise MissingExtra(
            f"{part} needs the '{extra}' extra, which is not installed (missing: "
            f"{', '.join(missing)}): {install_command(extra)}, or from a checkout: "
            f"pip install -e '.[{extra}]'",
            name=missing[0],
        )
