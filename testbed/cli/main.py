"""The `testbed` command (pyproject's [project.scripts]; `python -m testbed` is the same):

    testbed run SCENARIO.yaml [...]         = python -m testbed.run
    testbed sweep SWEEP.yaml [...]          = python -m testbed.sweep
    testbed report RUN_DIR [RUN_DIR ...]    = python -m analysis.report (a sweep directory: its grid report)
    testbed judge-server [...]              = python -m judges.server
    testbed export DIRECTORY [...]          = the SFT policy as a Hub-format checkpoint

Each subcommand hands the rest of the command line to that module's main(argv). The modules are
imported only once their subcommand is chosen: `testbed --help` and `testbed run --help` load no
torch (tests/test_packaging.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from testbed.extras import MissingExtra


def _run(argv: list[str]) -> int:
    from testbed.cli.run_command import main

    # As `python -m testbed.run`: a scenario whose `numerics` is not this process's restarts the
    # run in a fresh process with the right kernels (testbed/cpu_numerics.py).
    return main(argv, reexec=True)


def _sweep(argv: list[str]) -> int:
    from testbed.cli.sweep_command import main

    return main(argv)


def _report(argv: list[str]) -> int:
    # One sweep directory: the grid report (analysis/sweep_report.py), as `testbed sweep --report`
    # writes it; anything else is run directories for analysis/report.py.
    # analysis/ and judges/ stand beside the core, which names them by module path only (as registry.py does)
    if len(argv) == 1 and (Path(argv[0]) / "sweep.json").is_file():
        return importlib.import_module("analysis.sweep_report").main(argv)
    return importlib.import_module("analysis.report").main(argv)


def _judge_server(argv: list[str]) -> int:
    importlib.import_module("judges.server").main(argv)  # serves until stopped (SIGINT/SIGTERM)
    return 0


def _export(argv: list[str]) -> int:
    from testbed.cli.export import main

    return main(argv)


# name -> (what it does, its function, the module form it equals)
COMMANDS: dict[str, tuple[str, Callable[[list[str]], int], str]] = {
    "run": ("run a scenario: every arm x seed into a run directory, then its report", _run, "python -m testbed.run"),
    "sweep": ("run a scenario over a grid of settings and report the grid", _sweep, "python -m testbed.sweep"),
    "report": (
        "write the report of run directories (or of a sweep directory) again",
        _report,
        "python -m analysis.report",
    ),
    "judge-server": (
        "serve a judge as an OpenAI-compatible chat model (the 'llm' extra)",
        _judge_server,
        "python -m judges.server",
    ),
    "export": ("write a scenario's SFT policy as a Hub-format checkpoint", _export, "python -m testbed.cli.export"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: testbed COMMAND [ARGS ...]",
        "",
        "An online-learning testbed: language-model policies learn to write while the reward keeps changing.",
        "",
        "commands:",
    ]
    lines += [f"  {name:<{width}}  {what}" for name, (what, _, _) in COMMANDS.items()]
    lines += ["", "testbed COMMAND --help shows a command's arguments."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"testbed {version('testbed')}")
        except PackageNotFoundError:
            print("testbed (not installed: run from a checkout)")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"{usage()}\n\nerror: unknown command {name!r} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    try:
        code = COMMANDS[name][1](rest)
    except MissingExtra as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
