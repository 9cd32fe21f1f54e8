"""rliable, imported so that it works here, and numpy's global generator seeded for its bootstrap
(rliable draws from it and ignores a `random_state`). Used by analysis/metrics/nonstationary.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def _rliable():
    """rliable's `library` and `metrics` modules. arch 7.2.0, rliable's bootstrap (rliable 1.2.0
    requires arch < 8), decorates a method at import with pandas' private `deprecate_kwarg` in its
    pre-3.0 form; pandas 3 added a leading warning class. So arch is imported with a stand-in for
    the old form, and pandas' own is put back at once."""
    import sys

    if "arch.bootstrap" not in sys.modules:
        import inspect

        import pandas.util._decorators as decorators

        current = decorators.deprecate_kwarg
        if next(iter(inspect.signature(current).parameters)) == "klass":

            def old_form(old_arg_name, new_arg_name, mapping=None, stacklevel=2):
                return current(FutureWarning, old_arg_name, new_arg_name, mapping, stacklevel)

            decorators.deprecate_kwarg = old_form
        try:
            import arch.bootstrap  # noqa: F401
        finally:
            decorators.deprecate_kwarg = current
    from rliable import library, metrics

    return library, metrics


@contextlib.contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (which rliable's bootstrap draws from) for the block, and
    restore its state after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)
