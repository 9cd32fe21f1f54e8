"""Runs compared side by side must have computed with the same CPU numerics to be compared bit for
bit (testbed/cpu_numerics.py); the report warns when they did not."""

from __future__ import annotations

from typing import Any


def numerics_warnings(runs: list[Any]) -> list[str]:
    """Runs compared side by side whose CPU numerics differ (testbed/cpu_numerics.py): the same seed
    gives other rows under other kernels, so a difference between them is partly the kernels'.
    Each such run also gets a note (summary.md shows it)."""
    from testbed.cpu_numerics import comparison_key

    if len(runs) < 2:
        return []
    keys = {run.name: comparison_key(run.manifest.get("numerics")) for run in runs}
    if len(set(keys.values())) == 1 and None not in keys.values():
        return []

    def said(run: Any) -> str:
        numerics = run.manifest.get("numerics")
        if not numerics:
            return f"{run.name} (not recorded)"
        cpu = numerics.get("cpu", {}).get("model", "?")
        return f"{run.name} ({numerics.get('mode')}, {numerics.get('torch_cpu_capability')} kernels, {cpu})"

    for run in runs:
        run.notes.append(f"numerics: {said(run).split(' (', 1)[1].rstrip(')')}")
    return [
        "the runs compared used different CPU numerics, so the same seed computes other rows: "
        + "; ".join(said(run) for run in runs)
        + ". Rerun them with numerics: portable to compare like with like."
    ]
