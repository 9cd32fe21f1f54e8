"""The report's tables on the console: rich tables, or one line per row on a narrow console."""

from __future__ import annotations

from analysis.results import Analysis
from analysis.tables.brief import WIDTH, fold
from analysis.tables.rows import (
    ARM_HEADER,
    GOODHART_HEADER,
    IMPROVEMENT_HEADER,
    OFFPOLICY_HEADER,
    POOLED_HEADER,
    SEGMENT_HEADER,
    TURNS_HEADER,
    arm_rows,
    goodhart_rows,
    improvement_rows,
    offpolicy_rows,
    pooled_rows,
    segment_rows,
    switch_rows,
    turns_rows,
)
from analysis.tables.verdicts import lead_lines


def rich_table(title: str, header: list[str], rows: list[list[str]]):
    """A console table: the arm column left, the numbers right."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in header:
        table.add_column(col, justify="left" if col == "arm" else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_tables(a: Analysis, console=None) -> None:
    from rich.console import Console

    console = console or Console()
    if a.arms.empty:
        console.print("no episodes recorded")
        return
    title = a.runs[0].name if len(a.runs) == 1 else f"{len(a.runs)} runs"
    console.print(rich_table(f"Arms - {title}", ARM_HEADER, arm_rows(a.arms)))
    if not a.turns.empty:
        console.print(rich_table("Multi-turn episodes", TURNS_HEADER, turns_rows(a.turns)))
    if a.asynchronous:
        console.print(
            rich_table("Off-policy data (asynchronous runtime)", OFFPOLICY_HEADER, offpolicy_rows(a.offpolicy))
        )
    if not a.goodhart.empty:
        console.print(
            rich_table("Goodhart gap (training judge vs gold judge)", GOODHART_HEADER, goodhart_rows(a.goodhart))
        )
    if a.switches.empty:
        console.print("no switches in this run" if len(a.runs) == 1 else "no switches in these runs")
    else:
        _print_switches(a, console)
    for line in lead_lines(a)[:-2]:  # the verdicts, without the note on the bar
        print_folded(console, line)
    if not a.intervals.empty:
        seg = segment_rows(a.intervals, a.segments)
        if seg:
            print_rows(
                console, "Segments: reward area and dynamic regret (mean [95% CI] over seeds)", SEGMENT_HEADER, seg
            )
        print_rows(
            console,
            "Pooled over switches and segments (rliable: mean and IQM [95% CI])",
            POOLED_HEADER,
            pooled_rows(a.intervals),
        )
    if not a.improvement.empty:
        print_rows(
            console,
            "Probability of improvement (rliable, [95% CI]; each pair once: P(Y better) = 1 − P(X better))",
            IMPROVEMENT_HEADER,
            improvement_rows(a.improvement, a.arm_order),
            keys=3,
        )


def print_rows(console, title: str, header: list[str], rows: list[list[str]], keys: int = 2) -> None:
    """A rich table, or on a console under 120 columns one line per row: the first `keys` cells,
    then 'column value' for the others (a squeezed table wraps every cell)."""
    if console.width >= 120:
        console.print(rich_table(title, header, rows))
        return
    console.print(f"{title}:", highlight=False)
    for row in rows:
        rest = ", ".join(f"{h} {v}" for h, v in zip(header[keys:], row[keys:]))
        print_folded(console, f"  {'  '.join(row[:keys])}: {rest}")


def print_folded(console, line: str) -> None:
    """A row of a narrow console in lines no wider than the console (and 120 columns): a console that
    does not wrap, as the run's, would print it as one line wider than the terminal."""
    for part in fold(line, min(console.width, WIDTH)):
        console.print(part, highlight=False, markup=False, soft_wrap=True)


def _print_switches(a: Analysis, console) -> None:
    from rich import box
    from rich.table import Table

    title = (
        f"Realignment after each switch (mean [95% CI] over seeds; window "
        f"{', '.join(map(str, dict.fromkeys(a.windows.values())))}, fraction {a.fraction}"
    )
    if console.width < 120:  # a narrow console: one line per arm and switch instead of a squeezed table
        console.print(title + "):", highlight=False)
        for row in switch_rows(a.switches):
            print_folded(
                console,
                f"  {row[0]}  switch {row[1]}: bar {row[2]}, reached {row[3]}, episodes to bar {row[4]}, "
                f"KM median {row[5]}, judge calls {row[6]}, auc after {row[7]}, plateau -> dip {row[8]}, "
                f"own plateau {row[9]}, old half-life {row[10]}, crossover {row[11]}, new share {row[12]}, "
                f"old share to {a.old_level} {row[13]}",
            )
        return
    table = Table(title=title + "; details in summary.md)", box=box.SIMPLE_HEAD)
    short = [
        "arm",
        "switch",
        "bar",
        "reached",
        "episodes to bar",
        "KM median",
        "judge calls",
        "auc after",
        "plateau -> dip",
        "own plateau",
    ]
    for col in short:
        table.add_column(col, justify="left" if col in ("arm", "switch") else "right")
    for row in switch_rows(a.switches):
        table.add_row(row[0], row[1].replace(": ", " ").replace(" @ ", "\n@ "), *row[2:10])
    console.print(table)
