"""The arguments of `python -m testbed.run` (`parse_arguments`) and what is wrong with them before
any file is read (`argument_problem`): answered at once, with no heavy import."""

from __future__ import annotations

import argparse

__all__ = ["argument_problem", "parse_arguments"]

DESCRIPTION = "python -m testbed.run SCENARIO.yaml [--out DIR] [--run-name NAME] [--set key=value ...]"


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testbed.run", description=DESCRIPTION)
    parser.add_argument("scenario", nargs="?", help="scenario YAML file")
    parser.add_argument("--out", help="parent directory for the run directory (default: the scenario's output.dir)")
    parser.add_argument(
        "--run-name",
        help="name of the run directory (default: <scenario>-<timestamp>); a plain "
        "name (letters, digits, '_', '.', '-'), refused if it exists",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set budget.episodes=500 (repeatable)",
    )
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a killed or stopped run from its last checkpoint")
    parser.add_argument(
        "--runtime", choices=["sync", "ray"], help="override runtime.kind (sync: one process; ray: async actors)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the scenario and print the plan (models, judge, "
        "schedule, runtime, episodes, estimated judge calls); train nothing, write nothing",
    )
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument(
        "--pilot",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="with --dry-run: pilot runs of this scenario; the plan adds the seeds, core-hours and wall time each "
        "protocol claim on it needs (python -m analysis.power; repeatable)",
    )
    parser.add_argument(
        "--track",
        action="append",
        default=[],
        metavar="BACKEND",
        help="mirror the run to a tracker as it runs: tensorboard, mlflow or wandb (repeatable or comma-separated; "
        "sets tracking.backends; needs pip install 'testbed[track]')",
    )
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="skip the figures and tables at the end (the rows are "
        "all written; python -m analysis.report RUN_DIR makes them later)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="end with the report's full tables (as python -m analysis.report RUN_DIR prints them) "
        "instead of the short ending: the files, a verdict line per switch, the final rewards, the time; "
        "and print the traceback behind an error that names its cause (a Ray cluster's)",
    )
    return parser.parse_args(argv)


def argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments themselves, before any file is read."""
    if args.resume and (
        args.scenario or args.overrides or args.out or args.run_name is not None or args.runtime or args.track
    ):
        return "--resume takes only the run directory: the run continues with the scenario saved in it"
    if args.resume and args.dry_run:
        return "--dry-run plans a new run: give a scenario file, not --resume"
    if args.json and not args.dry_run:
        return "--json goes with --dry-run"
    if args.pilot and not args.dry_run:
        return "--pilot goes with --dry-run"
    if not args.resume and not args.scenario:
        return "give a scenario file (python -m testbed.run SCENARIO.yaml) or --resume RUN_DIR"
    if args.run_name is not None:
        from testbed.store import check_run_name

        try:
            check_run_name(args.run_name)
        except ValueError as exc:
            return f"--run-name {exc}"
    return None
