"""Sweeps: run a scenario over a grid of settings, with seeds, and report the grid side by side.

    python -m testbed.sweep SCENARIO.yaml --grid KEY=V1,V2 [--grid KEY2=...] [--set KEY=V] [--seeds 0,1,2]
    python -m testbed.sweep SWEEP.yaml [--set KEY=V] [--dry-run]
    python -m testbed.sweep --resume SWEEP_DIR        (continue: finished points are kept)
    python -m testbed.sweep --report SWEEP_DIR        (the grid report again, nothing run)

A sweep file names a base scenario, overrides for every point, and the grid:

    scenario: style_shift.yaml          # relative to the sweep file
    set: {budget.episodes: 3000}        # every point
    grid:
      world.hard_topics.share: [0.0, 0.5]                # a key and its values
      arms.running_mean.args.window: [16, 128, 512]      # arms by name (or index)
      batch:                                             # a named axis: labels -> several keys
        b32:  {arms.sao.args.episodes_per_update: 32, arms.grpo.args.episodes_per_update: 32}
        b128: {arms.sao.args.episodes_per_update: 128, arms.grpo.args.episodes_per_update: 128}

`--reuse EARLIER_SWEEP_DIR` counts the finished arms of an earlier sweep with the same settings
(the same job key) as done: they are read from there, not rerun.

Every point (the product of the axes) is a plain scenario, written to `points/pNN.yaml`, and run
with `python -m testbed.run` into `runs/pNN` (arms side by side where the scenario's runtime says
so). An arm x seed whose settings are the same at two points (the running mean's window does not
change SAO) runs once: the later point reuses the earlier point's rows, and `sweep.json` says
where each point's arms come from. The report (`analysis/sweep_report.py`) puts the points side
by side: per arm and switch, the realignment metrics with intervals over seeds.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from testbed.cli import run_command as run
from testbed.cli.plan import make_plan
from testbed.cli.sweep_grid import (
    Axis,
    Point,
    Sweep,
    expand,
    load_sweep,
)
from testbed.scenario.loading import ScenarioError
from testbed.scenario.schema import parse_scenario


def plan(points: list[Point], known: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Per point, arm -> the point whose run computes it (the first point with that job key), or
    the run directory of an earlier sweep that already has it (`known`: job key -> run dir)."""
    first: dict[str, str] = dict(known or {})
    out: dict[str, dict[str, str]] = {}
    for p in points:
        out[p.label] = {arm: first.setdefault(key, p.label) for arm, key in p.arm_keys.items()}
    return out


def finished_jobs(roots: list[str]) -> dict[str, str]:
    """Job key -> run directory, for every arm of a finished run in the given sweep directories."""
    out: dict[str, str] = {}
    for root in map(Path, roots):
        if not (root / "sweep.yaml").is_file():
            raise ScenarioError(f"--reuse {root}: not a sweep directory (no sweep.yaml)")
        _, points = reload(root)
        for point, owners in plan(points, finished_jobs(load_saved(root).reuse)).items():
            p = next(q for q in points if q.label == point)
            for arm, owner in owners.items():
                run_dir = owner_dir(root, owner)
                manifest = run_dir / "manifest.json"
                if manifest.exists() and json.loads(manifest.read_text()).get("status") == "done":
                    out.setdefault(p.arm_keys[arm], str(run_dir.resolve()))
    return out


def owner_dir(root: Path, owner: str) -> Path:
    """Where an arm's rows are: a point of this sweep (its label) or a run directory of another."""
    return Path(owner) if "/" in owner else root / "runs" / owner


def index_data(sweep: Sweep, points: list[Point], owners: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "name": sweep.name,
        "source": sweep.source,
        "axes": [a.name for a in sweep.axes],
        "reuse": sweep.reuse,
        "points": [{"label": p.label, "values": p.values, "arms": owners[p.label]} for p in points],
    }


def run_point(root: Path, point: Point, arms: list[str], links: dict[str, Any] | None = None) -> int:
    """Run the point's own arms (those no earlier point computed) into runs/<label>; `links`: the
    settings that make its trackers a child of the sweep (testbed/tracking/sweep_parent.py)."""

    run_dir = root / "runs" / point.label
    if run_dir.exists():
        manifest = run_dir / "manifest.json"
        try:
            status = json.loads(manifest.read_text()).get("status") if manifest.exists() else None
        except ValueError:  # damaged: the resume says which file and what to do
            status = None
        if status == "done":
            return 0
        return run.main(["--resume", str(run_dir)])
    data = copy.deepcopy(point.data)
    data["arms"] = [a for a in data["arms"] if a["name"] in arms]
    if links:
        data["tracking"] = {**data.get("tracking", {}), **links}
    path = root / "points" / f"{point.label}.run.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return run.main([str(path), "--out", str(root / "runs"), "--run-name", point.label])


def write_points(root: Path, sweep: Sweep, points: list[Point], owners: dict[str, dict[str, str]]) -> None:
    (root / "points").mkdir(parents=True, exist_ok=True)
    for p in points:
        (root / "points" / f"{p.label}.yaml").write_text(yaml.safe_dump(p.data, sort_keys=False))
    (root / "sweep.json").write_text(json.dumps(index_data(sweep, points, owners), indent=1))
    (root / "sweep.yaml").write_text(
        yaml.safe_dump(
            {
                "name": sweep.name,
                "base": sweep.base,
                "reuse": sweep.reuse,
                "grid": {a.name: dict(a.values) for a in sweep.axes},
            },
            sort_keys=False,
        )
    )


def run_sweep(root: Path, sweep: Sweep, points: list[Point], owners: dict[str, dict[str, str]], console: Any) -> int:
    from testbed.tracking.sweep_parent import finish_sweep, link_points

    tracking = points[0].data.get("tracking") or {}
    links = link_points(root, tracking)
    code = run_points(root, points, owners, console, links)
    finish_sweep(root, tracking, done=code == 0)
    return code


def run_points(
    root: Path, points: list[Point], owners: dict[str, dict[str, str]], console: Any, links: dict[str, Any]
) -> int:
    for p in points:
        own = [arm for arm, owner in owners[p.label].items() if owner == p.label]
        if not own:
            console.print(
                f"{p.label} ({', '.join(f'{k}={v}' for k, v in p.values.items())}): every arm already "
                "run at another point"
            )
            continue
        console.print(f"[bold]{p.label}[/] {', '.join(f'{k}={v}' for k, v in p.values.items())}: arms {', '.join(own)}")
        code = run_point(root, p, own, links)
        if code != 0:
            console.print(
                f"[red]point {p.label} ended with exit code {code}[/]; continue with "
                f"python -m testbed.sweep --resume {root}"
            )
            return code
    return 0


def load_saved(root: Path) -> Sweep:
    saved = yaml.safe_load((root / "sweep.yaml").read_text())
    return Sweep(
        saved["name"],
        saved["base"],
        [Axis(n, [(lbl, sets) for lbl, sets in vals.items()]) for n, vals in saved["grid"].items()],
        str(root / "sweep.yaml"),
        saved.get("reuse") or [],
    )


def reload(root: Path) -> tuple[Sweep, list[Point]]:
    """The sweep of a sweep directory, as it was planned."""
    sweep = load_saved(root)
    return sweep, expand(sweep)


def dry_run(points: list[Point], owners: dict[str, dict[str, str]], console: Any) -> int:
    """Each point, the arms it runs and reuses, and the judge calls its own arms would make (the
    run's dry-run plan, testbed/cli/plan.py; `python -m testbed.run points/pNN.yaml --dry-run` shows the rest)."""

    total = 0
    for p in points:
        mine = [a for a, o in owners[p.label].items() if o == p.label]
        reused = {a: o for a, o in owners[p.label].items() if o != p.label}
        calls = 0
        if mine:
            own = parse_scenario({**p.data, "arms": [a for a in p.data["arms"] if a["name"] in mine]}, p.label)
            calls = make_plan(own)["judge_calls"]["total"]["max"]
        total += calls
        console.print(
            f"  {p.label} {', '.join(f'{k}={v}' for k, v in p.values.items())}: runs {', '.join(mine) or '-'}"
            + (f"; reuses {', '.join(f'{a} from {o}' for a, o in reused.items())}" if reused else "")
            + f"; ~{calls:,} judge calls",
            highlight=False,
        )
    console.print(f"estimated judge calls in all: ~{total:,} (warm-ups counted where not cached yet)", highlight=False)
    return 0


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testbed.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", help="a sweep file (with a grid) or a scenario file (with --grid)")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a grid axis (repeatable)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field at every point (repeatable)",
    )
    parser.add_argument("--seeds", help="comma-separated seeds for every point, e.g. 0,1,2,3,4")
    parser.add_argument(
        "--track",
        action="append",
        default=[],
        metavar="BACKEND",
        help="trackers for every point (tensorboard, mlflow, wandb): the sweep is the parent, a child per point",
    )
    parser.add_argument("--out", default="runs", help="parent directory of the sweep directory (default: runs)")
    parser.add_argument("--name", help="the sweep directory's name (default: <sweep>-<timestamp>)")
    parser.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="SWEEP_DIR",
        help="an earlier sweep whose finished arms with the same settings are used, not rerun (repeatable)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the points and what would run, then exit")
    parser.add_argument("--resume", metavar="SWEEP_DIR", help="continue a sweep: finished points are kept")
    parser.add_argument("--report", metavar="SWEEP_DIR", help="write the grid report of a sweep directory again")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:

    args = parse_arguments(argv)
    console = Console()
    if sum(bool(x) for x in (args.file, args.resume, args.report)) != 1:
        return run.error("give one of: a sweep or scenario file, --resume SWEEP_DIR, --report SWEEP_DIR")
    try:
        if args.file:
            track = [f"tracking.backends=[{','.join(args.track)}]"] if args.track else []
            sweep = load_sweep(Path(args.file), args.grid, args.overrides + track, args.seeds)
            sweep.reuse = [str(Path(r).resolve()) for r in args.reuse]
            points = expand(sweep)
        else:
            if args.reuse:
                return run.error("--reuse goes with a new sweep; a resumed sweep keeps the ones it started with")
            root = Path(args.resume or args.report)
            if not (root / "sweep.yaml").is_file():
                return run.error(f"{root}: not a sweep directory (no sweep.yaml)")
            sweep, points = reload(root)
        owners = plan(points, finished_jobs(sweep.reuse))
    except ScenarioError as exc:
        return run.error(str(exc))
    jobs = sum(owner == p.label for p in points for owner in owners[p.label].values())
    seeds = len(points[0].data.get("seeds") or [0])
    console.print(
        f"sweep {sweep.name}: {len(points)} points, {jobs} distinct arms x {seeds} seeds = "
        f"{jobs * seeds} arm x seed runs"
    )
    if args.dry_run:
        try:
            return dry_run(points, owners, console)
        except ScenarioError as exc:
            return run.error(str(exc))
    if args.file:
        from testbed.store import check_run_name  # the store loads pandas

        name = args.name or f"{sweep.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        try:
            check_run_name(name)
        except ValueError as exc:
            return run.error(f"--name {exc}")
        root = Path(args.out) / name
        if root.exists():
            return run.error(f"{root} already exists; continue it with --resume {root} or choose another --name")
        write_points(root, sweep, points, owners)
    if not args.report:
        code = run_sweep(root, sweep, points, owners, console)
        if code != 0:
            return code
    from analysis.sweep_report import sweep_report  # the one place a sweep calls analysis

    out = sweep_report(root, console=console)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
