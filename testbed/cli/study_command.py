"""Studies: a scenario's claims answered in stages of seeds, stopping when they are decided.

    python -m testbed.study SCENARIO.yaml [--claim ID ...] [--out DIR] [--name NAME] [--set KEY=V ...]
                            [--protocol FILE] [--max-stages N]
    python -m testbed.study --resume STUDY_DIR [--max-stages N]

The protocol (analysis/protocol.yaml) names the claims judged on the scenario, the stages (cumulative
seed counts: 5, 10, 20, 40) and the budget in core-hours. Stage k runs the scenario with the seeds it
adds (stage 1, the pilot: seeds 0-4; stage 2: 5-9; ...) into STUDY_DIR/stageK, as `python -m
testbed.run` would (arms side by side, on Ray where the scenario says so: on a cluster with
`--set runtime.address=HEAD:PORT`). After each stage every open claim is looked at over all the
seeds so far (analysis/study_rule.py):

  decided    its paired t test at alpha / (number of stages) says X or Y is better, or TOST at
             that level puts the difference inside the claim's margin (equivalent);
  open       neither: the planner estimates the seeds its margin needs.

The study runs the next stage while a claim is open, the planner's estimate for some open claim
fits within the last stage (a claim that needs more seeds than the protocol plans is reported, not
chased), and the core-hours spent plus the next stage's cost stay within the budget. Everything is
written as it happens (study.json, study.md), so `--resume` continues a stopped study at the stage
it was in: a finished stage is never run again, an unfinished one resumes from its checkpoints.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.cli import run_command as run
from testbed.scenario.loading import ScenarioError

console = Console(stderr=True, soft_wrap=True)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testbed.study", description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", help="scenario YAML file")
    parser.add_argument("--claim", action="append", help="a claim id of the protocol (default: the scenario's)")
    parser.add_argument("--out", default="runs", help="parent directory of the study directory (default: runs)")
    parser.add_argument("--name", help="the study directory's name (default: study-<scenario>-<timestamp>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--protocol", help="the protocol file (default: analysis/protocol.yaml)")
    parser.add_argument("--resume", metavar="STUDY_DIR", help="continue a study from the stage it was in")
    parser.add_argument("--max-stages", type=int, help="stop after this many stages (the pilot alone: 1)")
    return parser.parse_args(argv)


def new_study(args: argparse.Namespace) -> Path:
    """The study directory and its study.json: the scenario, the overrides, the claims, the protocol."""
    from analysis.protocol import DEFAULT_PROTOCOL, load_protocol

    protocol_path = Path(args.protocol or DEFAULT_PROTOCOL)
    protocol = load_protocol(protocol_path)
    claims = (
        [protocol.claim(c).id for c in args.claim]
        if args.claim
        else [c.id for c in protocol.for_scenario(args.scenario)]
    )
    if not claims:
        raise ScenarioError(
            f"no claim of {protocol_path} is judged on {args.scenario}; name one with --claim "
            f"({', '.join(c.id for c in protocol.claims)})"
        )
    name = args.name or f"study-{Path(args.scenario).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    root = Path(args.out) / name
    if root.exists():
        raise ScenarioError(f"{root} exists: continue it with --resume {root}, or give another --name")
    root.mkdir(parents=True)
    state = {
        "scenario": str(Path(args.scenario).resolve()),
        "overrides": args.overrides,
        "claims": claims,
        "protocol": protocol.model_dump(mode="json"),
        "stages": [],
        "status": "running",
    }
    write_state(root, state)
    return root


def write_state(root: Path, state: dict[str, Any]) -> None:
    tmp = root / "study.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(root / "study.json")


def read_state(root: Path) -> dict[str, Any]:
    path = root / "study.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"--resume {root}: cannot read {path} ({exc}); it is not a study directory") from None


def run_stage(root: Path, state: dict[str, Any], k: int, seeds: list[int]) -> int:
    """Stage k's run (resumed if it was begun), with its seeds."""
    stage_dir = root / f"stage{k}"
    if stage_dir.exists():
        manifest = stage_dir / "manifest.json"
        status = json.loads(manifest.read_text()).get("status") if manifest.exists() else None
        return 0 if status == "done" else run.main(["--resume", str(stage_dir)])
    sets = [a for o in state["overrides"] for a in ("--set", o)]
    seed_list = "[" + ",".join(map(str, seeds)) + "]"
    argv = [state["scenario"], "--out", str(root), "--run-name", f"stage{k}", "--no-report", *sets]
    return run.main([*argv, "--set", f"seeds={seed_list}"])


def run_study(root: Path, state: dict[str, Any], max_stages: int | None) -> int:
    from analysis.protocol import Protocol
    from analysis.study_rule import look, next_stage_fits, study_markdown

    protocol = Protocol.model_validate(state["protocol"])
    claims = [protocol.claim(c) for c in state["claims"]]
    looked = 0
    while len(state["stages"]) < len(protocol.stages):
        k = len(state["stages"]) + 1
        if max_stages is not None and looked >= max_stages:
            console.print(f"stopped after {looked} stage(s) (--max-stages); continue with --resume {root}")
            return 0
        first = protocol.stages[k - 2] if k > 1 else 0
        seeds = list(range(first, protocol.stages[k - 1]))
        console.print(f"[bold]stage {k}[/]: seeds {seeds[0]}-{seeds[-1]} of {state['scenario']}", highlight=False)
        code = run_stage(root, state, k, seeds)
        if code != 0:
            console.print(f"[red]stage {k} ended with exit code {code}[/]; continue with --resume {root}")
            return code
        stage_dirs = [root / f"stage{i}" for i in range(1, k + 1)]
        result = look(stage_dirs, claims, protocol)
        state["stages"].append(result)
        go_on, why = next_stage_fits(result, protocol, k)
        state["status"], state["stopped_because"] = ("running", "") if go_on else ("done", why)
        write_state(root, state)
        (root / "study.md").write_text(study_markdown(state, claims))
        for line in result["lines"]:
            console.print(line, highlight=False)
        looked += 1
        if not go_on:
            console.print(f"study done: {why}; {root / 'study.md'}", highlight=False)
            return 0
    return 0


def numerics_of(state: dict[str, Any]) -> str:
    """The numerics the study's scenario runs with (its file and the study's overrides)."""
    from testbed.scenario.schema import load_scenario

    return load_scenario(state["scenario"], state["overrides"]).numerics


def main(argv: list[str] | None = None, reexec: bool = False) -> int:
    """`reexec`: start this module again in a fresh process when the scenario's `numerics` is not
    this process's (the command line does: a study of many seeds may run native numerics, which its
    manifests record); an in-process caller gets the stage's error instead."""
    args = parse_arguments(argv)
    if bool(args.resume) == bool(args.scenario):
        return run.error("give a scenario file or --resume STUDY_DIR (not both)")
    if args.resume and (args.claim or args.overrides or args.name or args.protocol):
        return run.error("--resume takes only the study directory (and --max-stages)")
    try:
        root = Path(args.resume) if args.resume else new_study(args)
        state = read_state(root)
    except (ScenarioError, KeyError, ValueError, OSError) as exc:
        return run.error(str(exc).strip("'\""))
    if state.get("status") == "done":
        console.print(f"{root} is done ({state.get('stopped_because', '')}); nothing to resume", highlight=False)
        return 0
    from testbed import cpu_numerics

    mode = numerics_of(state)
    if reexec and cpu_numerics.mode_problem(mode) is not None and cpu_numerics.requested_mode() != mode:
        console.print(f"numerics: {mode}: starting again with {cpu_numerics.ENV_VAR}={mode}")
        max_stages = ["--max-stages", str(args.max_stages)] if args.max_stages is not None else []
        cpu_numerics.reexec(mode, ["--resume", str(root), *max_stages], "testbed.study")
    return run_study(root, state, args.max_stages)


if __name__ == "__main__":
    sys.exit(main(reexec=True))
