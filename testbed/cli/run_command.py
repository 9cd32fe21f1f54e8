"""python -m testbed.run SCENARIO.yaml [--out DIR] [--run-name NAME] [--set key=value ...]
python -m testbed.run SCENARIO.yaml --dry-run [--json] [--set key=value ...]
python -m testbed.run --resume RUN_DIR

Wires a scenario together: loads the judge, schedule and trainers by name through the registry,
prepares the SFT policy (cached), runs every arm x seed through the loop into one run directory,
writes the report and ends in a few lines (analysis/tables/brief.py: the report's files, a verdict
line per switch, the final rewards, the time; `--verbose`: the report's tables). `--resume`
continues a run that was killed or stopped, from its last checkpoint, with the scenario saved in
the run directory. `--dry-run`
validates the scenario and prints its plan (testbed/cli/plan.py), training and writing nothing.

Exit codes: 0 done (also `--resume` of a run that is already finished: it says so and changes
nothing), 2 bad input, a run directory in use by another process (nothing trained) or a bug in a
judge plugin (with its traceback), 3 stopped on purpose with a checkpoint (judge outage, NaN/inf
updates; resumable), 130 interrupted. A Ray cluster that cannot take the job (connecting,
authenticating, a worker's runtime environment) exits 2 before anything can be continued, 3 after,
with a message naming the address and what to check (the traceback with --verbose).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from testbed import cpu_numerics, registry
from testbed.cli.memory_plan import refusal
from testbed.cli.plan import make_plan
from testbed.cli.plan_print import print_plan
from testbed.cli.run_args import argument_problem, parse_arguments
from testbed.cli.run_end import Stopwatch, cluster_failed, report_outages, stopped
from testbed.extras import MissingExtra
from testbed.judging.adapter import JudgePluginError
from testbed.judging.build import build_judge
from testbed.runtimes.dispatch import arm_problems, resolved_dict, runner_for, runtime_session
from testbed.runtimes.ray.cluster import ClusterError
from testbed.scenario.schema import Scenario, ScenarioError, load_scenario
from testbed.tracking.config import check_extras

# The modules that load torch, transformers or pandas (the runtimes, the store, the device check)
# are imported inside the functions that use them, so --help and argument mistakes answer at once
# (importing them takes seconds); tests/test_run_dirs.py checks it.
if TYPE_CHECKING:
    from testbed.protocols import Judge
    from testbed.runtimes.starting import StartingPolicy
    from testbed.store import RunStore

console = Console(stderr=True, soft_wrap=True)  # never break a path or a command inside a message
MAX_ERROR = 4_000  # characters of an error printed to the terminal


class RunFinished(Exception):
    """`--resume` of a run whose manifest says it is done: nothing to continue."""


def run_arms(
    scenario: Scenario,
    store: RunStore,
    manifest: dict[str, Any],
    resume_state: dict[str, Any] | None,
    *,
    starts: dict[int, StartingPolicy],
    **kw: Any,
) -> None:
    """Every arm x seed not finished yet: one after another, or side by side as Ray tasks."""
    from testbed.runtimes.loop import make_progress

    jobs = [
        (arm, seed)
        for arm in scenario.arms
        for seed in scenario.seeds
        if str(seed) not in manifest["arms"].get(arm.name, {})
    ]

    def done(arm_name: str, seed: int, totals: dict[str, Any]) -> None:  # the bars are gone at the end: say it
        manifest["arms"].setdefault(arm_name, {})[str(seed)] = totals
        store.write_manifest(manifest)
        progress.console.print(
            f"{arm_name} seed {seed} finished: {totals['episodes']} episodes in {totals['wall_s']:.0f} s"
        )

    with make_progress() as progress, runtime_session(scenario):
        # Side by side: the one-process arms (synchronous, simulated cluster). A Ray-runtime arm has actors
        # of its own, which need the cores a task would hold: those run one after another, afterwards.
        side = (
            [(a, s) for a, s in jobs if scenario.runtime_for(a).kind in ("sync", "simulated")]
            if scenario.runtime.parallel_arms
            else []
        )
        if len(side) > 1:
            from testbed.runtimes.ray.parallel import run_arms_in_parallel

            run_arms_in_parallel(
                scenario, side, starts=starts, store=store, on_done=done, log=progress.console.print, progress=progress
            )
            jobs = [job for job in jobs if job not in side]
        for arm, seed in jobs:
            here = resume_state and (resume_state["arm"], resume_state["seed"]) == (arm.name, seed)
            resume = resume_state if here else None
            start = starts[seed]
            totals = runner_for(scenario, arm)(
                scenario,
                arm,
                seed,
                store=store,
                progress=progress,
                log=progress.console.print,
                completed=manifest["arms"],
                resume=resume,
                base_policy=start.policy,
                tokenizer=start.tokenizer,
                policy_key=start.key,
                **kw,
            )
            done(arm.name, seed, totals)


def error(message: str) -> int:
    """Print a bad-input error; exit code 2. The message is data, never rich markup (a '[1,' in
    it stays), with control characters escaped and its length capped."""
    shown = "".join(repr(c)[1:-1] if c not in "\n\t" and unicodedata.category(c) == "Cc" else c for c in message)
    if len(shown) > MAX_ERROR:
        shown = f"{shown[:MAX_ERROR]}... ({len(shown) - MAX_ERROR} more characters)"
    console.print(f"[red]error:[/] {escape(shown)}", markup=True, highlight=False)
    return 2


def open_resume(run_dir: Path) -> tuple[Scenario, RunStore, dict[str, Any], dict[str, Any] | None]:
    """The scenario, store and manifest of a run to continue, rolled back to its last checkpoint;
    and that checkpoint, if it is one to continue inside an arm x seed. The store holds the run
    directory's lock, taken before anything is read or moved (RunInUseError if another process
    holds it); a finished run raises RunFinished and is left as it is."""
    from testbed.runtimes import checkpoint
    from testbed.store import RunStore, base_manifest

    if not (run_dir / "scenario.yaml").is_file():
        raise ScenarioError(f"--resume {run_dir}: not a run directory (no scenario.yaml)")
    scenario = load_scenario(run_dir / "scenario.yaml")
    store = RunStore(run_dir, scenario.output.flush_rows, scenario.output.flush_seconds)
    store.lock()
    try:
        manifest = store.read_manifest() or base_manifest(scenario.name, scenario.seeds, scenario.digest())
        if manifest.get("status") == "done":
            raise RunFinished(f"{run_dir} is already finished (its manifest says done); nothing to resume")
        found = checkpoint.load_latest(run_dir)
        state = found[1] if found else None
        moved = store.restore(state["store"] if state else {})
    except BaseException:
        store.unlock()
        raise
    manifest["arms"] = state["completed"] if state else {}
    manifest["status"] = "running"
    manifest.setdefault("resumes", []).append(
        {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "checkpoint": str(found[0].relative_to(run_dir)) if found else None,
            "discarded_parts": moved,
        }
    )
    where = (
        f"{found[0]} (arm {state['arm']} seed {state['seed']}, t={state['env']['clock']})"
        if found and state
        else "the start"
    )
    console.print(
        f"resuming {run_dir} from {where}; parts written after it moved to discarded/: "
        f"{sum(len(v) for v in moved.values())}"
    )
    return scenario, store, manifest, (state if state and not state["done"] else None)


def check_numerics(args: argparse.Namespace, scenario: Scenario, reexec: bool) -> int | None:
    """The scenario's `numerics` against the kernels this process loaded (testbed/cpu_numerics.py).
    The CLI starts itself again with the scenario's mode; a caller in-process gets exit 2."""

    problem = cpu_numerics.mode_problem(scenario.numerics)
    if problem is None:
        return None
    if reexec and cpu_numerics.requested_mode() != scenario.numerics:
        console.print(f"numerics: {scenario.numerics}: starting again with {cpu_numerics.ENV_VAR}={scenario.numerics}")
        cpu_numerics.reexec(scenario.numerics, args.argv, "testbed.run")
    return error(problem)


def start(args: argparse.Namespace, opened: dict[str, Any], reexec: bool = False) -> int | None:
    """Everything that can fail on bad input, before anything trains: the scenario, its judge and
    schedule, then the run directory. Fills `opened` as it goes (main closes what is there);
    returns the exit code of a run that does not start, or None."""
    from testbed.store import CorruptRunError, RunInUseError

    try:
        if args.resume:
            saved = Path(args.resume) / "scenario.yaml"  # without it, open_resume says it is not a run directory
            if saved.is_file() and (code := check_numerics(args, load_scenario(saved), reexec)) is not None:
                return code
            opened["scenario"], opened["store"], opened["manifest"], opened["resume_state"] = open_resume(
                Path(args.resume)
            )
        else:
            overrides = args.overrides + ([f"runtime.kind={args.runtime}"] if args.runtime else [])
            if args.track:  # --track a --track b,c: tracking.backends=[a, b, c]
                overrides.append(f"tracking.backends=[{','.join(args.track)}]")
            opened["scenario"] = load_scenario(args.scenario, overrides)
        check_extras(opened["scenario"].tracking)  # a tracker's library is missing: exit 2, nothing trained
        if args.dry_run:
            return dry_run(args, opened["scenario"])  # the plan warns about the device
        if not args.resume and (code := check_numerics(args, opened["scenario"], reexec)) is not None:
            return code
        from testbed.device import scenario_problems

        if problems := scenario_problems(opened["scenario"]) + arm_problems(opened["scenario"]):
            return error("; ".join(problems))
        opened["judge"] = build_judge(opened["scenario"])
        opened["schedule"] = opened["scenario"].schedule_object()
    except RunFinished as exc:
        console.print(escape(str(exc)), highlight=False)
        return 0
    except (ScenarioError, registry.RegistryError, CorruptRunError, RunInUseError, ValueError, TypeError) as exc:
        return error(str(exc))
    except MissingExtra as exc:
        return error(str(exc))
    except OSError as exc:
        return error(f"cannot {f'resume {args.resume}' if args.resume else 'start the run'}: {exc}")
    return None if args.resume else new_run(args, opened)


def dry_run(args: argparse.Namespace, scenario: Scenario) -> int:
    """Print the plan (testbed/cli/plan.py) and exit 0: nothing trained, no run directory, no cache written."""

    plan = make_plan(scenario, args.scenario, args.out, args.run_name)
    if reason := refusal(plan["memory"]):  # before anything is built: a plan that cannot fit
        return error(reason)
    power = None
    if args.pilot:  # the planner on pilot runs (analysis/power.py): the claims judged on this scenario
        from analysis.power import plan as plan_power
        from analysis.power import plan_lines
        from analysis.protocol import load_protocol

        # the claims judged on this scenario; else every claim whose arms the pilots hold
        claims = [c.id for c in load_protocol().for_scenario(args.scenario)] or None
        try:
            power = plan_power(args.pilot, claims)
        except (FileNotFoundError, ValueError) as exc:
            return error(f"--pilot: {exc}")
        plan["power"] = power.to_dict("records")
    if args.json:
        print(json.dumps(plan, indent=1, default=float))
    else:
        print_plan(plan, Console())
        if power is not None:
            print(f"Power, from the pilot runs {', '.join(args.pilot)} (python -m analysis.power):")
            print("\n".join(plan_lines(power)))
    return 0


def new_run(args: argparse.Namespace, opened: dict[str, Any]) -> int | None:
    """Create (and lock) the run directory of a new run and write its resolved scenario."""
    from testbed.store import RunInUseError, RunStore, base_manifest

    scenario = opened["scenario"]
    manifest = base_manifest(scenario.name, scenario.seeds, scenario.digest())  # slow imports: before the directory
    out_dir = Path(args.out or scenario.output.dir)
    try:
        store = RunStore.create(
            out_dir, scenario.name, scenario.output.flush_rows, scenario.output.flush_seconds, run_name=args.run_name
        )
    except (FileExistsError, RunInUseError, ValueError) as exc:
        return error(str(exc))
    except OSError as exc:
        return error(f"cannot write the run directory under {out_dir}: {exc}")
    opened.update(store=store, manifest=manifest, resume_state=None)
    store.write_scenario(resolved_dict(scenario))
    return None


def interrupted(store: RunStore | None, manifest: dict[str, Any] | None) -> int:
    """Ctrl-C: keep what was written, mark the run interrupted, say how to continue; exit 130."""
    if store is None or manifest is None:
        console.print("interrupted before the run directory was written; nothing to resume")
        return 130
    store.flush()
    manifest["status"] = "interrupted"
    store.write_manifest(manifest)
    console.print(f"interrupted; rows so far are in {store.root}; continue with --resume {store.root}", highlight=False)
    return 130


def close(opened: dict[str, Any]) -> None:
    """Release what start-up took: the judge (an LLM judge stops the local server it started)
    and the run directory's lock."""
    closer = getattr(opened.get("judge"), "close", None)
    if callable(closer):
        closer()
    if opened.get("store") is not None:
        for sink in opened["store"].sinks:  # the trackers: the report if the run is done, then wait for them
            sink.close()
        opened["store"].unlock()


def main(argv: list[str] | None = None, reexec: bool = False) -> int:
    """`reexec`: may start this module again in a fresh process when the scenario's `numerics` is
    not the process's (the command line does; an in-process caller gets an error instead)."""
    started = time.time()
    args = parse_arguments(argv)  # first: --help and argument mistakes need no heavy imports
    args.argv = list(sys.argv[1:] if argv is None else argv)
    problem = argument_problem(args)
    if problem:
        return error(problem)
    opened: dict[str, Any] = {}
    try:
        code = start(args, opened, reexec=reexec)
        if code is not None:
            return code
        return run_scenario(**opened, write_report=not args.no_report, verbose=args.verbose, started=started)
    except KeyboardInterrupt:  # in start-up; run_scenario handles its own
        return interrupted(opened.get("store"), opened.get("manifest"))
    finally:
        close(opened)


def run_scenario(
    scenario: Scenario,
    judge: Judge,
    schedule: Any,
    store: RunStore,
    manifest: dict[str, Any],
    resume_state: dict[str, Any] | None,
    write_report: bool = True,
    verbose: bool = False,
    started: float | None = None,
) -> int:
    """Every arm x seed of a started run into its run directory, then the report: its short
    ending, or with `verbose` its full tables; then the time taken since `started`."""
    from testbed.runtimes.learn import RunStopped
    from testbed.runtimes.starting import starting_policies
    from testbed.tracking.session import start_tracking, switches_of

    manifest["switch_points"] = list(schedule.switch_points())
    if callable(getattr(schedule, "switch_seconds", None)):  # on the simulated clock: per arm x seed in its totals
        manifest["switch_seconds"] = schedule.switch_seconds()
    manifest["budget"] = scenario.budget.episodes
    store.write_manifest(manifest)
    console.print(f"run directory: {store.root}")
    start_tracking(scenario.tracking, store, resolved_dict(scenario), switches_of(schedule), console.print)

    cpu_numerics.configure_torch(scenario.runtime.torch_threads)
    manifest["numerics"] = cpu_numerics.describe()
    clock = Stopwatch(started)
    try:
        starts = starting_policies(scenario, log=console.print)
        clock.lap("SFT")
        reports = {seed: start.report for seed, start in starts.items()}
        # one SFT policy for every seed (the default), or one per seed (policy.sft.per_seed)
        manifest["sft"] = (
            next(iter(reports.values()))
            if len({s.key for s in starts.values()}) == 1
            else {"per_seed": {str(seed): r for seed, r in reports.items()}}
        )
        store.write_manifest(manifest)
        run_arms(scenario, store, manifest, resume_state, starts=starts, judge=judge, schedule=schedule)
    except KeyboardInterrupt:
        return interrupted(store, manifest)
    except (RunStopped, JudgePluginError) as exc:  # exit 3: resumable; 2: a judge plugin's bug, with its traceback
        return stopped(store, manifest, exc, console)
    except ClusterError as exc:  # exit 2 before anything can be continued, else 3
        return cluster_failed(store, manifest, exc, console, verbose)
    except Exception:
        store.flush()
        manifest["status"] = "failed"
        store.write_manifest(manifest)
        raise
    manifest["status"] = "done"
    manifest["wall_s"] = clock.lap("arms")
    store.write_manifest(manifest)
    report_outages(manifest, console)
    end_run(store, clock, write_report, verbose)
    return 0


def end_run(store: RunStore, clock: Stopwatch, write_report: bool, verbose: bool) -> None:
    """The last lines: the report (its short ending, or its tables), the time, the run directory (stdout)."""
    if write_report:
        write_run_report(store, console, verbose)
        clock.lap("report")
    else:
        console.print(f"report skipped (--no-report): python -m analysis.report {store.root}", highlight=False)
    console.print(clock.line(), highlight=False)
    print(store.root)


def write_run_report(store: RunStore, console: Any, verbose: bool = True) -> None:
    """The finished run's report. Its tables are complete: a report bug must not fail the run (nor
    stop a sweep before its next point), so it is printed with the command that writes it again."""
    from analysis.report import report  # the one place the core calls analysis

    try:
        report([store.root], console=console, verbose=verbose)
    except Exception:
        traceback.print_exc()
        console.print(
            f"[bold red]the report failed[/]; the run is complete in {store.root}: "
            f"python -m analysis.report {store.root} writes the report again",
            highlight=False,
        )


if __name__ == "__main__":
    sys.exit(main(reexec=True))
