"""A run's stored responses judged again under another judge: how often the two judges agree, and
the reward the run would have had under the other one (the Goodhart gap between the training
judge and a gold judge, from one command).

    python -m analysis.rescore RUN_DIR --judge open_world [--judge-args '{...}'] [--name NAME] [--share S] [--again]

The re-judging is testbed/cli/rescore.py's (it needs the judges; analysis/ reads run directories
and never imports them): this command runs it as a child process when the run has no verdicts of
that name yet (`RUN_DIR/rescored/NAME.parquet`), or with `--again`, then reads them. Written to
`RUN_DIR/rescore-NAME/`: `agreement_by_seed.csv` (per arm, seed and phase), `agreement.csv` (per
arm and phase, and over the whole run: mean over seeds with a bootstrap 95% interval) and
`summary.md`. Per arm x seed (and phase):

  reward          the mean training reward (the judge the run trained on) of the rescored episodes
  rescored        the mean reward under the other judge, on the same episodes
  gap             reward - rescored: what the run earned that the other judge does not grant
  agreement       share of episodes where the two rewards are equal
  kappa           Cohen's kappa of the two {0, 1} rewards (agreement beyond chance; NaN where
                  either judge gave one value only)
  quality_agreement, style_agreement   the same share for quality and for the style read
  failed          episodes the other judge could not score (left out of the rest)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.metrics.realign import bootstrap_ci
from analysis.phases import phase_bounds
from analysis.tables.markdown import md_table

METRICS = ["reward", "rescored", "gap", "agreement", "kappa", "quality_agreement", "style_agreement"]
WHOLE_RUN = "all"


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's kappa of two {0, 1} ratings of the same items: (p_o - p_e) / (1 - p_e), p_o the
    observed agreement, p_e the agreement expected from each rater's share of 1s alone."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0:
        return float("nan")
    observed = float(np.mean(a == b))
    p_a, p_b = float(a.mean()), float(b.mean())
    expected = p_a * p_b + (1 - p_a) * (1 - p_b)
    return float("nan") if expected >= 1 else (observed - expected) / (1 - expected)


def _one(g: pd.DataFrame) -> dict:
    ok = g[g["rescored_error"].isna()]
    r, s = ok["reward"].to_numpy(float), ok["rescored_reward"].to_numpy(float)
    return {
        "episodes": len(ok),
        "failed": int(len(g) - len(ok)),
        "reward": float(r.mean()) if r.size else np.nan,
        "rescored": float(s.mean()) if s.size else np.nan,
        "gap": float((r - s).mean()) if r.size else np.nan,
        "agreement": float(np.mean(r == s)) if r.size else np.nan,
        "kappa": cohen_kappa(r, s),
        "quality_agreement": float(np.mean(ok["quality"].to_numpy(float) == ok["rescored_quality"].to_numpy(float)))
        if len(ok)
        else np.nan,
        "style_agreement": float(np.mean(ok["style"].astype(str) == ok["rescored_style"].astype(str)))
        if len(ok)
        else np.nan,
    }


def agreement_by_seed(rescored: pd.DataFrame, switch_points: list[int], budget: int) -> pd.DataFrame:
    """Per arm, seed and phase (and `WHOLE_RUN`): the module docstring's columns."""
    bounds = phase_bounds(switch_points, budget)
    rows = []
    for (arm, seed), g in rescored.groupby(["arm", "seed"], sort=True):
        rows.append({"arm": arm, "seed": seed, "phase": WHOLE_RUN, **_one(g)})
        for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
            part = g[(g["t"] >= a) & (g["t"] < b)]
            if len(part):
                rows.append({"arm": arm, "seed": seed, "phase": str(k), **_one(part)})
    return pd.DataFrame(rows)


def summarise(by_seed: pd.DataFrame) -> pd.DataFrame:
    """Per arm and phase: each metric's mean over seeds [95% bootstrap interval], the seeds, the episodes."""
    rows = []
    for (arm, phase), g in by_seed.groupby(["arm", "phase"], sort=False):
        row: dict = {"arm": arm, "phase": phase, "seeds": g["seed"].nunique(), "episodes": int(g["episodes"].sum())}
        for m in METRICS:
            mean, lo, hi = bootstrap_ci(g[m].to_numpy(float))
            row.update({m: mean, f"{m}_lo": lo, f"{m}_hi": hi})
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(r: pd.Series, m: str) -> str:
    if not np.isfinite(r[m]):
        return "-"
    ci = f" [{r[f'{m}_lo']:.3f}, {r[f'{m}_hi']:.3f}]" if np.isfinite(r[f"{m}_lo"]) else ""
    return f"{r[m]:.3f}{ci}"


def markdown(summary: pd.DataFrame, name: str, meta: dict, run_name: str) -> str:
    header = ["arm", "phase", "seeds", "episodes", *METRICS]
    body = [
        [str(r.arm), str(r.phase), str(r.seeds), str(r.episodes), *(_cell(r, m) for m in METRICS)]
        for _, r in summary.iterrows()
    ]
    return "\n".join(
        [
            f"# {run_name}: its responses judged again by {name}",
            "",
            f"Judge `{meta.get('judge', name)}` with args {meta.get('args', {})}; {meta.get('episodes', '?')} "
            f"episodes ({meta.get('share', 1)} of the judged ones), {meta.get('failed', 0)} it could not score.",
            "",
            md_table(header, body),
            "",
            "reward: the training judge's mean reward on these episodes; rescored: the other judge's on the same "
            "episodes (the reward the run would have had); gap = reward - rescored; agreement: share of equal "
            "rewards; kappa: Cohen's kappa of the two rewards; quality / style agreement: the same for quality "
            "and the style read. Mean over seeds [95% bootstrap interval]; phase 'all': the whole run. "
            "Per seed: agreement_by_seed.csv.",
            "",
        ]
    )


def report(run_dir: str | Path, name: str, console=None) -> Path:
    """Read `rescored/NAME.parquet` beside the run's manifest, write `rescore-NAME/`, print the table."""
    from rich.console import Console

    run_dir = Path(run_dir)
    path = run_dir / "rescored" / f"{name}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no verdicts of {name!r} (python -m analysis.rescore {run_dir} --judge ...)")
    rescored = pd.read_parquet(path)
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    budget = int(manifest.get("budget") or (rescored["t"].max() + 1))
    by_seed = agreement_by_seed(rescored, [int(s) for s in manifest.get("switch_points") or []], budget)
    summary = summarise(by_seed)
    out = run_dir / f"rescore-{name}"
    out.mkdir(exist_ok=True)
    by_seed.to_csv(out / "agreement_by_seed.csv", index=False)
    summary.to_csv(out / "agreement.csv", index=False)
    text = markdown(summary, name, meta, run_dir.name)
    (out / "summary.md").write_text(text)
    (console or Console()).print(text, markup=False, highlight=False, soft_wrap=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.rescore", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--judge", required=True, help="a registered judge or an import path 'pkg.mod:Name'")
    parser.add_argument("--judge-args", default="{}", help="the judge's arguments, a JSON object")
    parser.add_argument("--name", default=None, help="what to call its verdicts (default: the judge's name)")
    parser.add_argument("--share", type=float, default=1.0, help="rescore this share of the episodes")
    parser.add_argument("--again", action="store_true", help="judge again even where verdicts of NAME are stored")
    args = parser.parse_args(argv)
    name = args.name or args.judge.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    if args.again or not (Path(args.run_dir) / "rescored" / f"{name}.parquet").is_file():
        judging = [sys.executable, "-m", "testbed.cli.rescore", args.run_dir, "--judge", args.judge, "--no-report"]
        judging += ["--judge-args", args.judge_args, "--name", name, "--share", str(args.share)]
        code = subprocess.run(judging, check=False).returncode  # its own process: the judges are not imported here
        if code != 0:
            return code
    try:
        report(args.run_dir, name)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
