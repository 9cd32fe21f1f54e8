"""Report on a run directory: for now the switch table printed at the end of every run."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from analysis.realign import phase_shares, switch_table
from testbed.store import read_table


def print_switch_table(run_dir: str | Path, console: Console | None = None) -> None:
    console = console or Console()
    manifest = __import__("json").loads((Path(run_dir) / "manifest.json").read_text())
    episodes = read_table(run_dir, "episodes")
    evals = read_table(run_dir, "evals")
    if episodes.empty:
        console.print("no episodes recorded")
        return
    switches, budget = manifest.get("switch_points", []), manifest["budget"]
    table = Table(title=f"Reward around each switch (mean over seeds) - {Path(run_dir).name}")
    for col in ("arm", "switch", "at t", "before", "dip", "late", "target share first -> last"):
        table.add_column(col, justify="right" if col != "arm" else "left")
    sw = switch_table(episodes, switches, budget)
    sh = phase_shares(evals, switches, budget) if not evals.empty else None
    for arm in sw["arm"].unique() if not sw.empty else []:
        for i, s in enumerate(switches, start=1):
            rows = sw[(sw["arm"] == arm) & (sw["switch"] == i)]
            share = ""
            if sh is not None and not sh.empty:
                p = sh[(sh["arm"] == arm) & (sh["phase"] == i + 1)]
                if not p.empty:
                    share = f"{p['target'].iloc[0]} {p['share_first'].mean():.2f} -> {p['share_last'].mean():.2f}"
            table.add_row(arm, str(i), str(s), f"{rows['before'].mean():.2f}", f"{rows['dip'].mean():.2f}",
                          f"{rows['late'].mean():.2f}", share)
    console.print(table)


if __name__ == "__main__":
    for run in sys.argv[1:]:
        print_switch_table(run)
