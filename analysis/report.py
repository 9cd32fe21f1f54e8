"""Report on one or more run directories: realignment metrics, figures and a summary table.

    python -m analysis.report RUN_DIR [RUN_DIR ...] [--out DIR] [--window W] [--fraction F]
                              [--horizon H] [--old-level L] [--no-figures]

Where it writes (`default_out_dir`):
  one run      into the run directory itself (RUN_DIR/summary.csv, figures/, beside the tables);
  several      into `comparison-<first run's name>-vs-<n-1>-more/` beside the first run (the
               same runs always land in the same folder, re-running overwrites it); --out wins.

What it reads: each run's manifest and its tables `episodes`, `updates`, `evals`, `dropped` and
`reference` (the reference policy's reward per arm, seed and phase; older runs lack it: the bar
falls back to the best pre-switch plateau of the seed's arms and the regret to the best arm, and
the run's line in summary.md says so).

What it writes:
  summary.md              the table a person reads first. It leads with one verdict line per switch
                          and pair of arms (the first arm against each other one, or every pair for
                          three arms or fewer): the paired difference in episodes to the bar with
                          its t interval, P(first arm faster) and the run's power (analysis/tables/verdicts.py);
                          then per arm, per arm and switch, the metrics' definitions and the figures;
  summary.csv             one row per run, arm and switch (arm-level columns repeated; a run
                          without switches has one row per arm): means and 95% intervals, the
                          restricted mean and Kaplan-Meier median of episodes to the bar, reached k/n;
  switches_by_seed.csv    the per-seed metrics behind it (columns: analysis/metrics/realign.py; with `old_fall`,
                          analysis/metrics/nonstationary.py);
  seeds.csv               per run, arm and seed: each metric's mean over the seed's switches (and over the
                          segments after them): the values a paired verdict over seeds compares;
  segments_by_seed.csv    per run, arm, seed and segment between switches: reward area (auc), plateau,
                          the best arm's plateau, the reference the regret is against and the dynamic
                          regret (analysis/metrics/nonstationary.py);
  intervals.csv           per arm, metric and switch or segment, and pooled ("all"; segments after
                          switches only): mean and IQM over seeds with rliable's stratified-bootstrap
                          95% intervals;
  improvement.csv         per ordered pair of arms: the probability that the first is better (episodes
                          to the bar per switch, dynamic regret per segment), seeds resampled per arm;
  paired.csv              per pair of arms (first minus second, in the scenario's order), metric
                          (episodes and judge calls to the bar, auc_after, dip, episodes to the own
                          plateau per switch; dynamic regret and reward area per segment) and task
                          (and "all"): the paired per-seed difference, its paired t interval (the
                          verdict's) and paired bootstrap interval, P(first better) with its interval,
                          `pairing` (paired / unpaired: Welch, for arms of different runs), the
                          smallest difference the run resolves (`mde`) and the seeds a 10% / 20%
                          difference would need (analysis/stats/paired.py defines every column);
  turns.csv               multi-turn runs only: per arm, drafts per episode, early acceptances,
                          first- and last-draft rewards and the gain between them;
  goodhart.csv            runs with a gold judge only: per arm and phase, training and gold reward
                          and their gap, with intervals over seeds (analysis/goodhart.py);
  offpolicy.csv           asynchronous runs only: per arm, the staleness shares, dropped episodes,
                          episodes judged under another target than they were generated for, and
                          the DIS-masked and PPO-clipped token shares;
  figures/*.png           see analysis/figures/plots.py and analysis/figures/nonstationary.py.

From code: `report(run_dirs, out_dir=None, console=None) -> Path` (the output folder). It never
raises for a thin run (one arm, one seed, no switches, no evaluations, no updates): what cannot be
computed is left empty, and a figure that fails is reported on the console and skipped.
`print_switch_table(run_dir, console=None)` prints the console tables only (no files, no figures).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from analysis import cluster, goodhart

# ----------------------------------------------------------------------------------------------
# analysis
# The non-stationary metrics over runs grouped by schedule live in their own module.
from analysis.figures.report import _concat, _figure_jobs  # noqa: F401
from analysis.metrics import nonstationary, realign
from analysis.metrics import summary as realign_summary
from analysis.metrics import training as training_data
from analysis.metrics.per_run import _nonstationary, _with_old_fall, schedule_groups  # noqa: F401
from analysis.metrics.summary import seed_means
from analysis.results import Analysis

# The run directory's tables, read once: in their own module, importable from here as before.
from analysis.run_data import RunData, RunDataError, load_run
from analysis.tables.brief import brief_lines
from analysis.tables.console import print_tables
from analysis.tables.summary import summary_markdown


def _label(df: pd.DataFrame, run: RunData, labelled: bool) -> pd.DataFrame:
    """The table with a leading `run` column and, for several runs, arms labelled 'run:arm'."""
    df = df.copy()
    df.insert(0, "run", run.name)
    if labelled and "arm" in df:
        df["arm"] = run.name + ":" + df["arm"].astype(str)
    return df


def _run_tables(
    run: RunData, labelled: bool, w: int, fraction: float, horizon: int | None, old_level: float
) -> dict[str, pd.DataFrame]:
    """One run's per-seed switch metrics (on the common bar of its reference table, or the best
    plateau), their aggregate, and its per-arm tables, labelled for the report."""
    ps = realign.switch_metrics(
        run.episodes,
        run.switches,
        run.budget,
        run.evals,
        run.updates,
        window=w,
        fraction=fraction,
        horizon=horizon,
        seeds=run.seeds if not run.episodes.empty else None,
        reference=run.reference,
    )
    falls = nonstationary.old_fall(run.evals, run.switches, run.budget, run.episodes, old_level)
    ps = _label(_with_old_fall(ps, falls, old_level), run, labelled)
    arms = realign_summary.arm_overview(run.episodes, run.evals, run.updates, window=w)
    out = {
        "per_seed": ps,
        "switches": realign_summary.aggregate(ps, metrics=[*realign.METRICS, "old_fall"]),
        "arms": _label(arms, run, labelled).assign(window=w),
        "offpolicy": _label(training_data.offpolicy_overview(run.episodes, run.updates, run.dropped), run, labelled),
        "turns": _label(training_data.turns_overview(run.episodes, window=w), run, labelled),
    }
    gap = goodhart.gap_overview(run.episodes, run.switches, run.budget)
    if not gap.empty:
        gap = gap.merge(goodhart.gap_rise(run.episodes, w), on="arm", how="left", suffixes=("", "_all"))
        out["goodhart"] = _label(gap, run, labelled)
    return out


def arm_order(runs: list[RunData], labelled: bool) -> list[str]:
    """Every arm in the runs' order and, within a run, the scenario's (labelled 'run:arm' for several runs)."""
    return [f"{r.name}:{a}" if labelled else a for r in runs for a in r.arm_order()]


def analyse(
    runs: list[RunData],
    window: int | None = None,
    fraction: float = realign.DEFAULT_FRACTION,
    horizon: int | None = realign.DEFAULT_HORIZON,
    old_level: float = nonstationary.DEFAULT_OLD_LEVEL,
    reps: int = nonstationary.DEFAULT_REPS,
) -> Analysis:
    """Metrics for each run; with several runs the arm column becomes 'run:arm'. `old_level` and
    `reps` (bootstrap resamples) are the non-stationary metrics' (analysis/metrics/nonstationary.py)."""
    labelled = len(runs) > 1
    names = [r.name for r in runs]
    for i, run in enumerate(runs):  # two runs with the same directory name get distinct labels
        if names.count(run.name) > 1:
            run.name = f"{run.name}#{i + 1}"
    windows = {run.name: realign.auto_window(run.switches, run.budget, window) for run in runs}
    parts = [_run_tables(run, labelled, windows[run.name], fraction, horizon, old_level) for run in runs]

    def cat(name: str) -> pd.DataFrame:
        dfs = [p[name] for p in parts if name in p and not p[name].empty]
        return pd.concat(dfs, ignore_index=True) if dfs else pd.DataFrame()

    per_seed_df, switches_df, arms_df = cat("per_seed"), cat("switches"), cat("arms")
    if not arms_df.empty:
        right = switches_df.drop(columns=["seeds"], errors="ignore") if not switches_df.empty else None
        summary = arms_df.merge(right, on=["run", "arm"], how="left") if right is not None else arms_df.copy()
        summary = summary.assign(fraction=fraction, horizon=horizon)
    else:
        summary = pd.DataFrame()
    order = arm_order(runs, labelled)
    segments_df, intervals_df, improvement_df, paired_df = _nonstationary(
        runs, per_seed_df, windows, labelled, reps, order
    )
    return Analysis(
        runs,
        per_seed_df,
        switches_df,
        arms_df,
        summary,
        windows,
        fraction,
        horizon,
        labelled,
        cat("offpolicy"),
        cat("turns"),
        segments_df,
        intervals_df,
        improvement_df,
        old_level,
        cat("goodhart"),
        paired_df,
        order,
    )


# ----------------------------------------------------------------------------------------------
# figures


def make_figures(a: Analysis, fig_dir: Path, log=print) -> list[Path]:
    """Draw every figure that the data allows into fig_dir; returns the files written."""
    from analysis.figures import plots

    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = a.runs
    if a.labelled:
        for run in runs:
            for df in (run.episodes, run.updates, run.evals):
                if not df.empty and "arm" in df and not str(df["arm"].iloc[0]).startswith(run.name + ":"):
                    df["arm"] = run.name + ":" + df["arm"].astype(str)
    arms = list(dict.fromkeys(a.arms["arm"])) if not a.arms.empty else []
    palette = plots.arm_palette(arms)
    same_schedule = len({r.schedule_key() for r in runs}) == 1
    groups = [runs] if same_schedule else [[r] for r in runs]
    written: list[Path] = []

    def save(fig, name: str) -> None:
        if fig is None:
            return
        path = fig_dir / f"{name}.png"
        fig.savefig(path)
        written.append(path)

    for group in groups:
        suffix = "" if len(groups) == 1 else f"_{group[0].name}"
        jobs = _figure_jobs(a, group, palette, a.labelled)
        for name, job in jobs:
            try:
                save(job(), name + suffix)
            except Exception as exc:  # a figure must never sink the report
                log(f"figure {name + suffix} failed: {type(exc).__name__}: {exc}")
    try:
        per_seed, summ = a.per_seed, a.switches
        if same_schedule and "run" in per_seed:
            per_seed, summ = per_seed.drop(columns="run"), summ.drop(columns="run", errors="ignore")
        save(plots.speed_figure(per_seed, summ, palette=palette), "realignment_speed")
    except Exception as exc:
        log(f"figure realignment_speed failed: {type(exc).__name__}: {exc}")
    return written


# ----------------------------------------------------------------------------------------------
# entry points


def default_out_dir(run_dirs: list[Path]) -> Path:
    first = Path(run_dirs[0])
    if len(run_dirs) == 1:
        return first
    return first.parent / f"comparison-{first.name}-vs-{len(run_dirs) - 1}-more"


def report(
    run_dirs: str | Path | list[str | Path],
    out_dir: str | Path | None = None,
    console=None,
    *,
    window: int | None = None,
    fraction: float = realign.DEFAULT_FRACTION,
    horizon: int | None = realign.DEFAULT_HORIZON,
    old_level: float = nonstationary.DEFAULT_OLD_LEVEL,
    figures: bool = True,
    verbose: bool = True,
) -> Path:
    """Analyse the runs, write summary.md, the CSVs and figures/*.png (see the module docstring)
    into out_dir (default: `default_out_dir`), print the tables on `console` (a rich Console;
    default: a new one), and return out_dir. `verbose=False` prints the short ending of a run
    instead of the tables (analysis/tables/brief.py: the files, a verdict line per switch, the
    final rewards)."""
    from rich.console import Console

    console = console or Console()
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise ValueError("report: no run directories given")
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths)
    started = time.time()
    runs = [load_run(p) for p in paths]  # before the folder: for one run it is the run directory itself
    out.mkdir(parents=True, exist_ok=True)
    from analysis.run_numerics import numerics_warnings

    for warning in numerics_warnings(runs):
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    a = analyse(runs, window=window, fraction=fraction, horizon=horizon, old_level=old_level)
    a.summary.to_csv(out / "summary.csv", index=False)
    a.per_seed.to_csv(out / "switches_by_seed.csv", index=False)
    a.segments.to_csv(out / "segments_by_seed.csv", index=False)
    seed_means(a.per_seed, a.segments).to_csv(out / "seeds.csv", index=False)
    a.intervals.to_csv(out / "intervals.csv", index=False)
    a.improvement.to_csv(out / "improvement.csv", index=False)
    a.paired.to_csv(out / "paired.csv", index=False)
    if a.asynchronous:
        a.offpolicy.to_csv(out / "offpolicy.csv", index=False)
    if not a.turns.empty:
        a.turns.to_csv(out / "turns.csv", index=False)
    if not a.goodhart.empty:
        a.goodhart.to_csv(out / "goodhart.csv", index=False)
    written = make_figures(a, out / "figures", log=console.print) if figures else []
    simulated = cluster.report_section(runs, out)  # runtime.kind: simulated only
    (out / "summary.md").write_text(summary_markdown(a, written, out) + simulated)
    if not verbose:
        for line in brief_lines(a, out, written):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        return out
    print_tables(a, console)
    console.print(f"report: {out} ({len(written)} figures, {time.time() - started:.1f} s)", highlight=False)
    return out


def print_switch_table(run_dir: str | Path, console=None) -> None:
    """Print the console tables of one run (no files written)."""
    print_tables(analyse([load_run(run_dir)]), console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", help="run directories (several are compared side by side)")
    parser.add_argument(
        "--out",
        help="output folder (default: the run directory; for several runs "
        "comparison-<first>-vs-<n>-more/ beside the first)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help=f"rolling-reward window in episodes (default {realign.DEFAULT_WINDOW}, "
        "at most a quarter of the shortest phase)",
    )
    parser.add_argument(
        "--fraction",
        type=float,
        default=realign.DEFAULT_FRACTION,
        help="recovered = rolling reward >= fraction x pre-switch plateau (default %(default)s)",
    )
    parser.add_argument(
        "--horizon",
        type=int,
        default=realign.DEFAULT_HORIZON,
        help="episodes after a switch for the mean reward (default %(default)s; 0 = whole phase)",
    )
    parser.add_argument(
        "--old-level",
        type=float,
        default=nonstationary.DEFAULT_OLD_LEVEL,
        help="old_fall: episodes until the old style's held-out share falls to this share (default %(default)s)",
    )
    parser.add_argument("--no-figures", action="store_true", help="tables only")
    args = parser.parse_args(argv)
    try:
        out = report(
            args.run_dirs,
            args.out,
            window=args.window,
            fraction=args.fraction,
            horizon=args.horizon or None,
            old_level=args.old_level,
            figures=not args.no_figures,
        )
    except (FileNotFoundError, RunDataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
