"""Judge a run's stored responses again under another judge (the re-judging half of
`python -m analysis.rescore`, which runs this module when the run has no verdicts of that judge):

    python -m testbed.cli.rescore RUN_DIR --judge open_world [--judge-args '{...}'] [--name NAME] [--share 0.25]

Every judged training episode of `episodes.parquet` (its `response`, with the prompt rendered
again from its `prompt_id` and the `candidates` it was judged against, its `target_style` and
`topic`) goes to the judge, as a gold judge scores a run: with the run's world rules (hard
topics) and no judge noise. The verdicts are written to `RUN_DIR/rescored/NAME.parquet` (one row
per episode, keyed by arm, seed and t) with `NAME.json` (the judge, its args with secrets
hidden, the counts); then analysis/rescore.py writes the agreement and the reward the run would
have had. The judging is here, under testbed/cli/, because it needs the judges: analysis/ reads
run directories and never imports them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.judging.build import judge_from_config
from testbed.scenario.plugins import JudgeConfig
from testbed.store import read_table
from testbed.types import JudgeRequest
from testbed.world import prompts, render_prompt
from testbed.world.rules import WorldRules, unit_hash, wrap

CHUNK = 512  # requests per judge call
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def requests_of(episodes: pd.DataFrame) -> list[JudgeRequest]:
    """One request per episode row, as the training judge saw it."""
    specs = {s.prompt_id: s for s in [*prompts("train"), *prompts("heldout")]}
    out = []
    for row in episodes.itertuples(index=False):
        candidates = tuple(c for c in str(row.candidates or "").split(",") if c)
        spec = specs.get(str(row.prompt_id))
        prompt = render_prompt(spec, list(candidates)) if spec is not None and candidates else ""
        topic = str(row.topic) if isinstance(row.topic, str) and row.topic else None
        out.append(JudgeRequest(prompt, str(row.response), str(row.target_style), candidates, topic))
    return out


def world_rules(run_dir: Path) -> WorldRules:
    """The run's world rules (scenario.yaml beside its tables), else the default world's."""
    path = run_dir / "scenario.yaml"
    if not path.is_file():
        return WorldRules()
    import yaml

    from testbed.scenario.schema import parse_scenario

    return parse_scenario(yaml.safe_load(path.read_text()), str(path)).world.rules()


def to_rescore(run_dir: Path, share: float) -> pd.DataFrame:
    """The run's judged training episodes (a hashed `share` of them, the same ones every time)."""
    episodes = read_table(run_dir, "episodes")
    if episodes.empty or "response" not in episodes:
        raise ValueError(f"{run_dir}: no episodes with a stored response (episodes.parquet)")
    judged = episodes[episodes["judge_error"].isna()]
    if share < 1:
        judged = judged[[unit_hash("rescore", a, s, t) < share for a, s, t in zip(judged.arm, judged.seed, judged.t)]]
    return judged.reset_index(drop=True)


def rescore(run_dir: Path, judge: Any, share: float = 1.0, log: Any = print) -> pd.DataFrame:
    """Each episode's verdict under `judge` (failed ones with their error), beside its training reward."""
    episodes = to_rescore(run_dir, share)
    requests = requests_of(episodes)
    verdicts: list[Any] = []
    with asyncio.Runner() as runner:  # one loop for the judge's lifetime (an LLM judge's client lives on it)
        for i in range(0, len(requests), CHUNK):
            verdicts += list(runner.run(judge.judge(requests[i : i + CHUNK])))
            log(f"rescored {len(verdicts)}/{len(requests)}")
    return pd.DataFrame(
        {
            "arm": episodes["arm"],
            "seed": episodes["seed"],
            "t": episodes["t"],
            "target_style": episodes["target_style"],
            "reward": episodes["reward"],
            "quality": episodes["r_quality"],
            "style": episodes["judged_style"],
            "rescored_reward": [None if v.error else v.reward for v in verdicts],
            "rescored_quality": [None if v.error else int(v.quality) for v in verdicts],
            "rescored_style": [None if v.error else v.style for v in verdicts],
            "rescored_error": [v.error for v in verdicts],
        }
    )


def write(run_dir: Path, name: str, table: pd.DataFrame, meta: dict[str, Any]) -> Path:
    """`rescored/NAME.parquet` and `NAME.json`, each written whole, then renamed into place."""
    out = run_dir / "rescored"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.parquet"
    tmp = out / f".{name}.parquet.tmp{os.getpid()}"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=str))
    return path


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m testbed.cli.rescore", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--judge", required=True, help="a registered judge or an import path 'pkg.mod:Name'")
    parser.add_argument("--judge-args", default="{}", help="the judge's arguments, a JSON object")
    parser.add_argument("--name", default=None, help="what to call its verdicts (default: the judge's name)")
    parser.add_argument("--share", type=float, default=1.0, help="rescore this share of the episodes (0 < s <= 1)")
    parser.add_argument("--no-report", action="store_true", help="write the verdicts only, not the agreement")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    run_dir, name = Path(args.run_dir), args.name or args.judge.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    try:
        judge_args = json.loads(args.judge_args)
        if not isinstance(judge_args, dict):
            raise ValueError("not a JSON object")
        if not NAME.fullmatch(name):
            raise ValueError(f"--name {name!r}: letters, digits, '_', '.' and '-' only")
        if not 0 < args.share <= 1:
            raise ValueError(f"--share {args.share}: must be in (0, 1]")
        if not run_dir.is_dir():
            raise ValueError(f"{run_dir}: not a run directory")
        config = JudgeConfig(type=args.judge, args=judge_args)
        judge = wrap(judge_from_config(config, "--judge"), world_rules(run_dir), noise=False)
    except (ValueError, OSError) as exc:  # ScenarioError and pydantic's errors are ValueErrors
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.time()
    try:
        table = rescore(run_dir, judge, args.share, log=lambda m: print(m, file=sys.stderr))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        closer = getattr(judge, "close", None)
        if callable(closer):
            closer()
    from testbed.cli.plan_arithmetic import public_args

    meta = {
        "judge": config.type,
        "path": config.path,
        "args": public_args(judge_args),
        "share": args.share,
        "episodes": len(table),
        "failed": int(table["rescored_error"].notna().sum()),
        "seconds": round(time.time() - started, 1),
    }
    print(write(run_dir, name, table, meta))
    if not args.no_report:
        from analysis.rescore import report  # the CLI calls the analysis, as run.py does at a run's end

        report(run_dir, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
