"""The planner: from pilot runs, how many seeds each claim needs, what they cost and how long they take.

    python -m analysis.power RUN_DIR [RUN_DIR ...] [--claim ID ...] [--difference 10%] [--cores K]
                             [--protocol FILE] [--json]
    python -m analysis.power RUN_DIR [RUN_DIR ...] --efficiency X Y    (each endpoint's resolvable share)

The runs are pilots of one scenario (a run, or the stages of a study: the same scenario with other
seeds; their per-seed values are pooled, which is exact, since every per-seed value depends on its own
seed only). For each claim of the protocol (analysis/protocol.yaml) whose two arms are in the runs,
on its endpoint and task:

  n                 pilot seeds with a value in both arms; the paired difference X - Y with its t interval;
  sd_diff           the per-seed differences' sd, with its 95% interval from the chi-square law of
                    (n - 1) sd^2 / sigma^2: with 5 seeds the true sd may be 0.6x to 2.9x the pilot's;
  difference        the difference to resolve: the claim's margin (or --difference), in the endpoint's unit;
  seeds             the seeds a paired t test needs to detect it at the protocol's alpha (two-sided) and
                    power, at the pilot's sd, and [at the sd interval's ends]: the interval the sd's
                    uncertainty gives (analysis/paired_stats.seeds_needed);
  core_hours        seeds x the CPU time of one seed of the claim's two arms (the arms' `cpu_s` in the
                    manifest, measured on the run's machine under its numerics: portable or native), with
                    the same interval;
  wall_h            that many arm x seed tasks on K cores, one task a core (Ray's parallel arms), in waves.

SFT policies and critic warm-ups are cached per seed and not counted; a new seed's costs a few
minutes more (the run's manifest shows them). Claims whose arms cannot differ where they run
(`not_testable`) get their reason, never a seed count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.protocol import DEFAULT_PROTOCOL, Claim, Protocol, ProtocolError, load_protocol
from analysis.stats.paired import POOLED, paired_table
from analysis.stats.tests import seeds_needed

__all__ = ["core_seconds", "efficiency", "plan", "pooled_tables", "sd_interval"]


def sd_interval(sd: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The interval of a normal sample's sd from n values: sd sqrt((n-1)/chi2_{hi}), sd sqrt((n-1)/chi2_{lo})."""
    if not (np.isfinite(sd) and n >= 2):
        return float("nan"), float("nan")
    df = n - 1
    lo_q, hi_q = stats.chi2.ppf([0.5 + confidence / 2, 0.5 - confidence / 2], df)
    return float(sd * math.sqrt(df / lo_q)), float(sd * math.sqrt(df / hi_q))


class PerSeedFiles:
    """A directory of a report's per-seed tables (switches_by_seed.csv, segments_by_seed.csv), as
    docs/results/ keeps them for runs whose run directory is not at hand: no manifest, so no cost."""

    def __init__(self, path: Path):
        self.path, self.name = path, path.name
        self.manifest: dict[str, Any] = {"scenario": path.name.split("-")[0]}  # style_shift-1cfe171
        # run.json beside the CSVs: the run's scenario, git_commit, numerics and the command that made it
        described = path / "run.json"
        if described.exists():
            try:
                self.manifest.update(json.loads(described.read_text()))
            except ValueError as exc:
                raise ValueError(f"{described}: not JSON ({exc})") from exc
        self.switches = pd.read_csv(path / "switches_by_seed.csv")
        segments = path / "segments_by_seed.csv"
        self.segments = pd.read_csv(segments) if segments.exists() else pd.DataFrame()
        self.seeds = sorted(int(s) for s in self.switches["seed"].unique())


def pooled_tables(run_dirs: Sequence[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame, list[Any]]:
    """(per-seed switch metrics, per-seed segment metrics, the runs) of one scenario's runs, pooled
    as one run (their seeds must not overlap: a seed twice would be counted twice). A directory
    holding only a report's per-seed CSVs (docs/results/<run>/) counts as a run without a manifest."""
    from analysis.report import analyse, load_run

    runs: list[Any] = []
    switches, segments = [], []
    for path in map(Path, run_dirs):
        if not (path / "episodes.parquet").exists() and (path / "switches_by_seed.csv").exists():
            files = PerSeedFiles(path)
            runs.append(files)
            switches.append(files.switches)
            segments.append(files.segments)
            continue
        a = analyse([load_run(path)])
        runs += a.runs
        switches.append(a.per_seed)
        segments.append(a.segments)
    seen: dict[int, str] = {}
    for run in runs:
        for seed in run.seeds:
            if seed in seen:
                raise ValueError(f"seed {seed} is in both {seen[seed]} and {run.path}: pool runs of other seeds")
            seen[seed] = str(run.path)

    def cat(tables: list[pd.DataFrame]) -> pd.DataFrame:
        tables = [t for t in tables if t is not None and not t.empty]
        out = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
        if "run" in out:
            out["run"] = runs[0].name  # one run for the pairing
        return out

    return cat(switches), cat(segments), runs


def core_seconds(runs: Sequence[Any], arm: str) -> tuple[float, float, int]:
    """(mean CPU seconds, mean wall seconds, arm x seeds counted) of one arm x seed in the runs'
    manifests (`cpu_s`; a run from before it was recorded: its wall time)."""
    cpu, wall = [], []
    for run in runs:
        for totals in ((run.manifest.get("arms") or {}).get(arm) or {}).values():
            if isinstance(totals, dict) and "wall_s" in totals:
                wall.append(float(totals["wall_s"]))
                cpu.append(float(totals.get("cpu_s") or totals["wall_s"]))
    if not cpu:
        return float("nan"), float("nan"), 0
    return float(np.mean(cpu)), float(np.mean(wall)), len(cpu)


def _claim_row(claim: Claim, table: pd.DataFrame) -> pd.Series | None:
    if table is None or table.empty or claim.endpoint not in table:
        return None
    rows = paired_table(table, [claim.endpoint], claim.unit, arms=[claim.x, claim.y])
    if rows.empty:
        return None
    chosen = rows[rows["task"].astype(str) == claim.task]
    if chosen.empty and claim.task == POOLED:  # one task only: it is the pooled value
        chosen = rows
    return None if chosen.empty else chosen.iloc[0]


def plan_claim(
    claim: Claim,
    tables: dict[str, pd.DataFrame],
    runs: Sequence[Any],
    protocol: Protocol,
    difference: str | float | None = None,
    cores: int = 1,
) -> dict[str, Any]:
    """The planner's row for one claim (module docstring)."""
    out: dict[str, Any] = {"claim": claim.id, "x": claim.x, "y": claim.y, "endpoint": claim.endpoint}
    out["task"] = claim.task
    if claim.not_testable:
        return {**out, "status": "not testable: " + claim.not_testable}
    row = _claim_row(claim, tables[claim.unit])
    if row is None or not np.isfinite(row["sd_diff"]):
        return {**out, "status": "no paired values in these runs"}
    n, sd = int(row["n"]), float(row["sd_diff"])
    sd_lo, sd_hi = sd_interval(sd, n)
    target = claim.model_copy(update={"margin": difference}) if difference is not None else claim
    delta = target.margin_value(float(row["mean_y"]))
    need = [seeds_needed(s, delta, protocol.alpha, protocol.power) for s in (sd, sd_lo, sd_hi)]
    cpu = [core_seconds(runs, arm) for arm in (claim.x, claim.y)]
    per_seed_cpu = sum(c[0] for c in cpu)
    per_task_wall = max(c[1] for c in cpu)

    def core_hours(seeds: float) -> float:
        return seeds * per_seed_cpu / 3600 if np.isfinite(seeds) else float("inf")

    def wall_hours(seeds: float) -> float:
        return math.ceil(2 * seeds / max(1, cores)) * per_task_wall / 3600 if np.isfinite(seeds) else float("inf")

    return {
        **out,
        "status": "planned",
        "n": n,
        "mean_x": float(row["mean_x"]),
        "mean_y": float(row["mean_y"]),
        "diff": float(row["diff"]),
        "diff_lo": float(row["diff_lo"]),
        "diff_hi": float(row["diff_hi"]),
        "sd_diff": sd,
        "sd_lo": sd_lo,
        "sd_hi": sd_hi,
        "difference": delta,
        "difference_is": str(target.margin),
        "seeds": need[0],
        "seeds_lo": need[1],
        "seeds_hi": need[2],
        "core_s_per_seed": per_seed_cpu,
        "core_hours": core_hours(need[0]),
        "core_hours_lo": core_hours(need[1]),
        "core_hours_hi": core_hours(need[2]),
        "cores": cores,
        "wall_hours": wall_hours(need[0]),
        "wall_hours_hi": wall_hours(need[2]),
        "numerics": ",".join(sorted({str((r.manifest.get("numerics") or {}).get("mode", "?")) for r in runs})),
    }


def plan(
    run_dirs: Sequence[str | Path],
    claim_ids: Sequence[str] | None = None,
    difference: str | float | None = None,
    cores: int | None = None,
    protocol: Protocol | None = None,
) -> pd.DataFrame:
    """One row per claim: the given ones; else the protocol's claims on the runs' scenario; else every
    claim whose two arms the runs hold."""
    protocol = protocol or load_protocol()
    switches, segments, runs = pooled_tables(run_dirs)
    arms = set(switches["arm"]) if "arm" in switches else set()
    scenario = str(runs[0].manifest.get("scenario") or "") if runs else ""
    holding = [c for c in protocol.claims if {c.x, c.y} <= arms]
    own = [c for c in holding if Path(c.scenario).stem == scenario]
    claims = [protocol.claim(c) for c in claim_ids] if claim_ids else (own or holding)
    tables = {"switch": switches, "segment": segments}
    cores = cores or os.cpu_count() or 1
    return pd.DataFrame([plan_claim(c, tables, runs, protocol, difference, cores) for c in claims])


# The endpoints a realignment claim can be judged on, each as a per-seed value (the mean over its
# tasks), to compare their efficiency on the same runs (`efficiency`).
EFFICIENCY_ENDPOINTS = (
    ("episodes_to_bar", "switch"),  # first passage to the common bar, censored at the phase's end
    ("auc_after", "switch"),  # reward area over a fixed window after the switch
    ("dynamic_regret", "segment"),  # the reference's reward minus the arm's, per segment after a switch
    ("old_half_life", "switch"),  # episodes until the old style's held-out share halves
)


def efficiency(run_dirs: Sequence[str | Path], x: str, y: str) -> pd.DataFrame:
    """Per endpoint and task (each switch or segment, and "all"): the paired difference X - Y, the
    per-seed sd of the differences, the smallest difference the runs resolve at 80% power (mde), and
    that as a share of the arms' mean: the endpoint that resolves the smallest share is the most
    efficient among those that mean the same thing."""
    switches, segments, _ = pooled_tables(run_dirs)
    tables = {"switch": switches, "segment": segments}
    rows = []
    for endpoint, unit in EFFICIENCY_ENDPOINTS:
        table = tables[unit]
        if table.empty or endpoint not in table:
            continue
        for r in paired_table(table, [endpoint], unit, arms=[x, y]).to_dict("records"):
            scale = (abs(r["mean_x"]) + abs(r["mean_y"])) / 2
            rows.append(
                {
                    "endpoint": endpoint,
                    "task": r["task"],
                    "n": r["n"],
                    "mean_x": r["mean_x"],
                    "mean_y": r["mean_y"],
                    "diff": r["diff"],
                    "sd_diff": r["sd_diff"],
                    "mde": r["mde"],
                    "mde_share": r["mde"] / scale if scale else float("nan"),
                }
            )
    return pd.DataFrame(rows)


def _num(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def plan_lines(table: pd.DataFrame) -> list[str]:
    """The plan as lines a person reads (one block per claim)."""
    lines = []
    for r in table.to_dict("records"):
        head = f"{r['claim']}: {r['x']} - {r['y']} on {r['endpoint']} ({r['task']})"
        if r["status"] != "planned":
            lines.append(f"{head}: {r['status']}")
            continue
        digits = 3 if abs(r["mean_y"]) < 10 else 0
        lines += [
            f"{head}: pilot n={int(r['n'])}, difference {_num(r['diff'], digits)} [{_num(r['diff_lo'], digits)}, "
            f"{_num(r['diff_hi'], digits)}], sd {_num(r['sd_diff'], digits)} [{_num(r['sd_lo'], digits)}, "
            f"{_num(r['sd_hi'], digits)}]",
            f"  to resolve {_num(r['difference'], digits)} ({r['difference_is']}): {_num(r['seeds'])} seeds "
            f"[{_num(r['seeds_lo'])}, {_num(r['seeds_hi'])}], {_num(r['core_hours'], 1)} core-hours "
            f"[{_num(r['core_hours_lo'], 1)}, {_num(r['core_hours_hi'], 1)}] ({r['numerics']} numerics), "
            f"{_num(r['wall_hours'], 1)} h on {int(r['cores'])} cores (up to {_num(r['wall_hours_hi'], 1)} h)",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.power", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="pilot run directories of one scenario (other seeds each)")
    parser.add_argument("--claim", action="append", help="a claim id of the protocol (repeatable; default: all)")
    parser.add_argument("--difference", help="the difference to resolve: '10%%' of |Y's mean| or a number")
    parser.add_argument("--cores", type=int, help="cores for the wall-time estimate (default: this machine's)")
    parser.add_argument("--protocol", default=str(DEFAULT_PROTOCOL))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--efficiency",
        nargs=2,
        metavar=("X", "Y"),
        help="instead of the plan: each endpoint's resolvable difference for X - Y on these runs",
    )
    args = parser.parse_args(argv)
    if args.efficiency:
        try:
            table = efficiency(args.runs, *args.efficiency)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(table.to_json(orient="records", indent=1) if args.json else table.round(4).to_string(index=False))
        return 0
    difference: str | float | None = args.difference
    if difference is not None and not str(difference).endswith("%"):
        try:
            difference = float(difference)
        except ValueError:
            print(f"error: --difference {args.difference!r}: a share like 10% or a number", file=sys.stderr)
            return 2
    try:
        table = plan(args.runs, args.claim, difference, args.cores, load_protocol(args.protocol))
    except (FileNotFoundError, KeyError, ValueError, ProtocolError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(table.to_dict("records"), indent=1, default=float))
    else:
        print("\n".join(plan_lines(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
