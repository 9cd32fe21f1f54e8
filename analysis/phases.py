"""The phases of a run between its switches, and what each phase had: its target style and, where
the schedule changes the judge, its judge (the most frequent value in the phase's rows, so a
gradual change counts where most of its episodes fell). Pure functions of the run's tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

# What changes at a switch: the target style and, where the schedule changes the judge, the judge
SWITCH_KINDS = ("from_style", "to_style", "from_judge", "to_judge")


def phase_bounds(switch_points: Sequence[int], budget: int) -> list[int]:
    """[0, T1, T2, ..., budget]: the clock values where the phases start and the run ends."""
    return [0, *[int(s) for s in switch_points], int(budget)]


def phase_targets(
    episodes: pd.DataFrame, evals: pd.DataFrame | None, switch_points: Sequence[int], budget: int
) -> list[str | None]:
    """The target style of each phase (the most frequent `target_style` in it), None if unknown."""
    return phase_values(episodes, evals, switch_points, budget, "target_style")


def phase_judges(
    episodes: pd.DataFrame, evals: pd.DataFrame | None, switch_points: Sequence[int], budget: int
) -> list[str | None]:
    """The judge of each phase (the most frequent `judge` in it: a schedule that changes the judge
    writes that column), None where the run has no such column."""
    return phase_values(episodes, evals, switch_points, budget, "judge")


def phase_values(
    episodes: pd.DataFrame, evals: pd.DataFrame | None, switch_points: Sequence[int], budget: int, column: str
) -> list[str | None]:
    """The most frequent value of `column` in each phase (episodes first, else the evaluations)."""
    bounds = phase_bounds(switch_points, budget)
    sources = [df for df in (episodes, evals) if df is not None and not df.empty and column in df]
    out: list[str | None] = []
    for a, b in zip(bounds, bounds[1:]):
        value = None
        for df in sources:
            phase = df[(df["t"] >= a) & (df["t"] < b)][column].dropna()
            if not phase.empty:
                value = str(phase.mode().iloc[0])
                break
        out.append(value)
    return out


def switch_label(row: Mapping) -> str:
    """'cute -> chuunibyou', 'chuunibyou, judge default -> v2' (a judge change, the target kept),
    or both changes at once, for a row with from_style, to_style (and from_judge, to_judge)."""
    old, new = row.get("from_style"), row.get("to_style")
    a, b = row.get("from_judge"), row.get("to_judge")
    judge = f"judge {a} -> {b}" if isinstance(a, str) and isinstance(b, str) and a != b else ""
    if judge and old == new:
        return f"{new}, {judge}"
    return f"{old} -> {new}" + (f", {judge}" if judge else "")
