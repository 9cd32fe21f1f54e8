"""The report of a sweep directory (testbed/cli/sweep_command.py): the grid points side by side.

    python -m analysis.sweep_report SWEEP_DIR

For each point, its arms' rows are gathered from the runs that computed them (`sweep.json`) and
analysed exactly as one run is (`analysis.report.analyse`). Written into SWEEP_DIR/report/:

  grid.csv          one row per point, arm and switch: the axis values, then the realignment
                    metrics (means over seeds, 95% intervals, seeds that reached the common bar)
                    and the arm's final and mean reward;
                    and, per phase, the medians over updates of what the arm's baseline knew
                    (`analysis.metrics.training.BASELINE_STATS`: the critic's explained variance, its
                    first-token value's EV and spread, the mean |advantage|), as `<stat>_phase<k>`;
                    and the segment after each switch: `segment_auc_after` (its whole reward
                    area; `auc_after` is the first `horizon` episodes'), `dynamic_regret_after`
                    (analysis/metrics/nonstationary.py, rliable intervals);
  grid.md           the same as a markdown table per switch;
  figures/grid_recovery.png   episodes to the bar per point and arm, per switch (restricted mean, interval).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.metrics.training import BASELINE_STATS, baseline_overview
from analysis.phases import switch_label
from analysis.report import RunData, analyse, load_run
from analysis.tables.console import rich_table
from analysis.tables.markdown import md_table
from analysis.tables.rows import fmt_ci

# the per-switch metrics shown side by side (name -> column header)
SHOWN = {
    "episodes_to_bar": "episodes to the bar",
    "dip": "dip",
    "auc_after": "reward over horizon",
    "dynamic_regret_after": "dynamic regret after",
}
REACHED = "reached bar"  # the column header of `reached_text`


def reached_text(r: pd.Series) -> str:
    """'k/n': seeds that reached the common bar of those with a time to it."""
    return f"{int(r['reached_bar'])}/{int(r['bar_seeds'])}" if r["bar_seeds"] else "n/a"


def point_run(root: Path, point: dict[str, Any], loaded: dict[str, RunData]) -> RunData:
    """One point's arms as one run: each arm's rows from the run that computed it."""
    parts: dict[str, list[pd.DataFrame]] = {"episodes": [], "updates": [], "evals": [], "dropped": [], "reference": []}
    manifest: dict[str, Any] = {}
    for arm, owner in point["arms"].items():
        if owner not in loaded:  # a point of this sweep, or a run directory of an earlier one (--reuse)
            loaded[owner] = load_run(Path(owner) if "/" in owner else root / "runs" / owner)
        run = loaded[owner]
        manifest = manifest or run.manifest
        for name in parts:
            df = getattr(run, name)
            if not df.empty and "arm" in df:
                parts[name].append(df[df["arm"] == arm])
    tables = {name: pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame() for name, dfs in parts.items()}
    return RunData(path=root / "runs" / point["label"], manifest=manifest, name=point["label"], **tables)


def with_segments(summary: pd.DataFrame, intervals: pd.DataFrame) -> pd.DataFrame:
    """Each switch row gains the segment after it: `segment_auc_after` and `dynamic_regret_after`
    (mean over seeds, rliable 95% interval as `_lo`, `_hi`)."""
    if intervals.empty or "switch" not in summary:
        return summary
    seg = intervals[(intervals["unit"] == "segment") & (intervals["task"].astype(str) != "all")]
    for metric, name in (("auc", "segment_auc_after"), ("dynamic_regret", "dynamic_regret_after")):
        part = seg[seg["metric"] == metric].assign(switch=lambda d: d["task"].astype(int))
        part = part[["arm", "switch", "mean", "mean_lo", "mean_hi"]].rename(
            columns={"mean": name, "mean_lo": f"{name}_lo", "mean_hi": f"{name}_hi"}
        )
        summary = summary.merge(part, on=["arm", "switch"], how="left")
    return summary


def grid_table(root: Path) -> pd.DataFrame:
    """One row per point, arm and switch (see the module docstring)."""
    index = json.loads((root / "sweep.json").read_text())
    loaded: dict[str, RunData] = {}
    rows = []
    for point in index["points"]:
        missing = [
            o
            for o in set(point["arms"].values())
            if not ((Path(o) if "/" in o else root / "runs" / o) / "manifest.json").exists()
        ]
        if missing:
            continue  # not run yet (an interrupted sweep): left out, the table says which points it has
        run = point_run(root, point, loaded)
        a = analyse([run])
        summary = with_segments(a.summary.copy(), a.intervals)
        # what each arm's baseline knew, per phase: one column per statistic and phase
        stats = baseline_overview(run.updates, run.switches, run.budget)
        if not stats.empty:
            wide = stats.pivot(index="arm", columns="phase", values=list(BASELINE_STATS))
            wide.columns = [f"{stat}_phase{phase}" for stat, phase in wide.columns]
            summary = summary.merge(wide.reset_index(), on="arm", how="left")
        for axis in reversed(index["axes"]):
            summary.insert(0, axis, point["values"][axis])
        summary.insert(0, "point", point["label"])
        rows.append(summary)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def grid_markdown(grid: pd.DataFrame, axes: list[str]) -> str:
    out = []
    for switch, g in grid.groupby("switch", sort=True):
        first, ts = g.iloc[0], sorted({int(t) for t in g["t"].dropna()})
        at = f"t={ts[0]}" if len(ts) == 1 else f"t={ts[0]}..{ts[-1]} (each arm x seed at its own)" if ts else "t=?"
        out.append(f"### Switch {int(switch)} at {at} ({switch_label(first)})\n")
        header = ["point", *axes, "arm", REACHED, *SHOWN.values(), "final reward"]
        body = [
            [
                r["point"],
                *[str(r[a]) for a in axes],
                str(r["arm"]),
                reached_text(r),
                *[fmt_ci(r, m, 0 if m == "episodes_to_bar" else 3) for m in SHOWN],
                f"{r['final_reward']:.3f}",
            ]
            for _, r in g.iterrows()
        ]
        out.append(md_table(header, body))
        out.append("")
    return "\n".join(out)


def grid_figure(grid: pd.DataFrame, axes: list[str]):
    """Episodes to the bar per point (x) and arm (hue), one panel per switch: restricted mean and 95% interval."""
    from analysis.figures.style import arm_palette, new_figure

    switches = sorted(grid["switch"].dropna().unique())
    fig, panels = new_figure(
        len(switches), 1, max(6.0, 0.35 * grid["point"].nunique() * grid["arm"].nunique()), 3.0 * len(switches) + 0.8
    )
    arms = sorted(grid["arm"].unique())
    colors = arm_palette(arms)
    points = list(dict.fromkeys(grid["point"]))
    width = 0.8 / max(1, len(arms))
    for ax, switch in zip(panels[:, 0], switches):
        g = grid[grid["switch"] == switch]
        for j, arm in enumerate(arms):
            r = g[g["arm"] == arm].set_index("point").reindex(points)
            x = [i - 0.4 + width * (j + 0.5) for i in range(len(points))]
            mean, lo, hi = r["episodes_to_bar"], r["episodes_to_bar_lo"], r["episodes_to_bar_hi"]
            ax.errorbar(
                x,
                mean,
                yerr=[(mean - lo).clip(lower=0), (hi - mean).clip(lower=0)],
                fmt="o",
                capsize=3,
                label=arm,
                color=colors.get(arm),
            )
        ax.set_xticks(range(len(points)))
        ax.set_xticklabels(list(points), rotation=0)
        ax.set_ylabel("episodes to the bar")
        ax.set_title(f"switch {int(switch)}")
    panels[0, 0].legend(title="arm", fontsize=8)
    labels = grid.drop_duplicates("point").set_index("point")[axes]
    fig.suptitle(
        "; ".join(f"{p}: " + ", ".join(f"{a}={labels.loc[p, a]}" for a in axes) for p in points), fontsize=6, wrap=True
    )
    return fig


def short_names(axes: list[str]) -> list[str]:
    """Axis names for narrow tables: the last dotted part where that is unambiguous."""
    last = [a.split(".")[-1] for a in axes]
    return [short if last.count(short) == 1 else axis for axis, short in zip(axes, last)]


def sweep_report(root: str | Path, console: Any = None) -> Path:
    """Write SWEEP_DIR/report/ (see the module docstring), print the grid; returns the folder."""
    from rich.console import Console

    console = console or Console()
    root = Path(root)
    out = root / "report"
    out.mkdir(parents=True, exist_ok=True)
    axes = json.loads((root / "sweep.json").read_text())["axes"]
    grid = grid_table(root)
    if grid.empty:
        console.print(f"{root}: no finished point yet")
        return out
    grid.to_csv(out / "grid.csv", index=False)
    (out / "grid.md").write_text(f"# Sweep {root.name}\n\n" + grid_markdown(grid, axes))
    if grid["switch"].notna().any():
        (out / "figures").mkdir(exist_ok=True)
        fig = grid_figure(grid[grid["switch"].notna()], axes)
        fig.savefig(out / "figures" / "grid_recovery.png")
    for switch, g in grid[grid["switch"].notna()].groupby("switch"):
        rows = [
            [
                r["point"],
                *[str(r[a]) for a in axes],
                str(r["arm"]),
                reached_text(r),
                *[fmt_ci(r, m, 0 if m == "episodes_to_bar" else 3) for m in SHOWN],
            ]
            for _, r in g.iterrows()
        ]
        title = f"switch {int(switch)}: {switch_label(g.iloc[0])} (mean [95% CI] over seeds)"
        console.print(rich_table(title, ["point", *short_names(axes), "arm", REACHED, *SHOWN.values()], rows))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not (Path(argv[0]) / "sweep.json").is_file():
        print("usage: python -m analysis.sweep_report SWEEP_DIR (a directory with sweep.json)", file=sys.stderr)
        return 2
    print(sweep_report(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
