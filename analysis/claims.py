"""A card of the SAO paper's claims that the testbed can test, with its verdict on each.

    python -m analysis.claims RUN_DIR [RUN_DIR ...] [--out claims.md]

Each claim names two arms (X is claimed better than Y), a metric and the scenario whose run
holds both arms. The card finds, among the runs given, the first whose arms include both, and
compares them paired, seed by seed (`analysis.paired.paired_table`; the arms of a seed share its
SFT policy), pooled over the switches (or the segments after them): each seed's mean over them.

Verdict, from the paired Student-t interval of the difference X - Y:
  supported       the interval lies wholly on the side the claim says;
  contradicted    it lies wholly on the other side;
  not resolved    it straddles 0: the card gives the smallest difference the run resolves at its
                  seeds (80% power, alpha 0.05) so "not resolved" is never read as "no difference";
  not run         no run given holds both arms: the card gives the command that would.

Metrics (analysis/realign.py, analysis/segments.py): `episodes_to_bar` (episodes after a switch
until the rolling reward reaches 90% of the reference policy's reward in the new phase, censored at
the phase's length when it never does), `old_half_life` (episodes until the old style's held-out
share halves), `dynamic_regret` (the reference's reward minus the arm's mean reward per segment
after a switch).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import paired
from analysis.verdicts import num, seeds_text

# what a metric is called on the card, and its unit
METRIC_NAMES = {
    "episodes_to_bar": ("episodes to the bar", "episodes"),
    "old_half_life": ("old style's half-life", "episodes"),
    "dynamic_regret": ("dynamic regret after switches", "reward per episode"),
}
UNITS = {"episodes_to_bar": "switch", "old_half_life": "switch", "dynamic_regret": "segment"}


@dataclass(frozen=True)
class Claim:
    source: str  # where the paper (or the testbed's issues) makes it
    text: str
    x: str  # the arm claimed better
    y: str
    metric: str
    scenario: str

    @property
    def command(self) -> str:
        return f"python -m testbed.run {self.scenario}"


S, A, R = "scenarios/style_shift.yaml", "scenarios/ablations.yaml", "scenarios/revision_shift.yaml"
CLAIMS: list[Claim] = [
    Claim(
        "§4.5",
        "After a preference switch SAO realigns faster than the 128-reward running mean",
        "sao",
        "running_mean",
        "episodes_to_bar",
        S,
    ),
    Claim("§4.5", "After a preference switch SAO realigns faster than GRPO", "sao", "grpo", "episodes_to_bar", S),
    Claim(
        "§4.5",
        "SAO suppresses the previously dominant style faster than the running mean",
        "sao",
        "running_mean",
        "old_half_life",
        S,
    ),
    Claim(
        "Table 4", "Without faster value updates (K = 1) SAO does worse", "sao", "wo_faster_value", "dynamic_regret", A
    ),
    Claim(
        "Table 4",
        "Without the frozen attention (critic trains all) SAO does worse",
        "sao",
        "wo_frozen_attention",
        "dynamic_regret",
        A,
    ),
    Claim(
        "Table 4",
        "Vanilla VAPO (PPO clip instead of DIS) does worse than SAO",
        "sao",
        "vanilla_vapo",
        "dynamic_regret",
        A,
    ),
    Claim("Table 4", "The running mean does worse than SAO", "sao", "running_mean", "dynamic_regret", A),
    Claim(
        "Table 5",
        "Token-level GAE ahead of step-level GAE at the turn's last token",
        "sao",
        "step_gae_last",
        "dynamic_regret",
        A,
    ),
    Claim(
        "Table 5",
        "Step-level GAE at the last token ahead of the turn's average",
        "step_gae_last",
        "step_gae_average",
        "dynamic_regret",
        A,
    ),
    Claim(
        "§3 order",
        "Advantages from the critic after its K steps (the paper's order) realign faster than from "
        "the critic before it saw the batch",
        "sao",
        "sao_pre_update_advantages",
        "episodes_to_bar",
        A,
    ),
    Claim(
        "open",
        "Does skipping observations discard signal? Token-level GAE (skipping the editor's notes) "
        "realigns faster than GAE run through them (naive)",
        "sao_token",
        "sao_naive",
        "episodes_to_bar",
        R,
    ),
]


def _pooled(table: pd.DataFrame, claim: Claim) -> pd.Series | None:
    """The paired comparison X - Y pooled over the tasks (a row of paired.PAIRED_COLUMNS)."""
    unit = UNITS[claim.metric]
    if table is None or table.empty or claim.metric not in table:
        return None
    rows = paired.paired_table(table, [claim.metric], unit, arms=[claim.x, claim.y])
    if rows.empty:
        return None
    pooled = rows[rows["task"] == paired.POOLED]
    return (pooled if not pooled.empty else rows).iloc[0]


def verdict_of(row: pd.Series, claim: Claim) -> str:
    """supported / contradicted / not resolved, from the comparison's verdict."""
    if str(row["verdict"]).startswith("none:"):  # neither arm reached the bar on some seeds
        return "no verdict: " + str(row["verdict"]).removeprefix("none: ")
    if not bool(row["resolved"]):
        return "not resolved at this power"
    return "supported" if row["verdict"] == f"{claim.x} better" else "contradicted"


def estimate_text(row: pd.Series, claim: Claim) -> str:
    name, unit = METRIC_NAMES[claim.metric]
    digits = 3 if claim.metric == "dynamic_regret" else 0
    kind = row["pairing"]
    text = (
        f"{name}, {claim.x} − {claim.y}: {num(row['diff'], digits)} [{num(row['diff_lo'], digits)}, "
        f"{num(row['diff_hi'], digits)}] {unit}, {kind} over {int(row['n'])} seeds; "
        f"P({claim.x} better) = {row['p_better']:.2f}"
    )
    if not bool(row["resolved"]):
        text += (
            f"; resolvable: {num(row['mde'], digits)}; 10% needs {seeds_text(row['seeds_10pct'])} seeds, "
            f"20% {seeds_text(row['seeds_20pct'])}"
        )
    return text


def scenario_name(a) -> str:
    """The scenario a run was made from (the manifest's `scenario`, else the run's name)."""
    return str(a.runs[0].manifest.get("scenario") or a.runs[0].name)


def card_rows(analyses: list) -> list[dict]:
    """One dict per claim: claim, verdict, estimate, run, command. A run of the claim's own
    scenario is preferred; another run that holds both arms stands in, and the card says which."""
    out = []
    for claim in CLAIMS:
        found = None
        own = Path(claim.scenario).stem
        for a in sorted(analyses, key=lambda a: scenario_name(a) != own):
            arms = set(a.arm_order)
            if {claim.x, claim.y} <= arms:
                table = a.per_seed if UNITS[claim.metric] == "switch" else a.segments
                found = (a, _pooled(table, claim))
                break
        if found is None or found[1] is None:
            out.append(
                {
                    "claim": claim,
                    "verdict": "not run",
                    "estimate": "no run given holds both arms",
                    "run": "",
                    "command": claim.command,
                }
            )
            continue
        a, row = found
        run = a.runs[0]
        commit = str(run.manifest.get("git_commit") or run.manifest.get("commit") or "")[:7]
        numerics = (run.manifest.get("numerics") or {}).get("mode", "")
        command = f"python -m testbed.run scenarios/{scenario_name(a)}.yaml"
        command += " --set numerics=native" if numerics == "native" else ""
        out.append(
            {
                "claim": claim,
                "verdict": verdict_of(row, claim),
                "estimate": estimate_text(row, claim),
                "run": f"{run.name} (commit {commit or '?'}, numerics {numerics or '?'})",
                "command": command,
            }
        )
    return out


def card_markdown(rows: list[dict]) -> str:
    lines = [
        "# Claims card",
        "",
        "The paper's claims the testbed can test, each with its verdict on the runs given "
        "(`python -m analysis.claims`; definitions in analysis/claims.py). Paired over the seeds the arms share, "
        "pooled over the switches; interval: paired Student-t 95%.",
        "",
        "| source | claim | verdict | estimate [95% interval] | run | reproduce |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["claim"]
        lines.append(
            f"| {c.source} | {c.text} | **{r['verdict']}** | {r['estimate']} | {r['run']} | `{r['command']}` |"
        )
    lines += [
        "",
        "Not on the card: whether a critic changes the Goodhart surface (`scenarios/goodhart.yaml`; the "
        "report's goodhart.csv gives the gap per arm and phase, not yet a paired per-seed metric).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--out", default="claims.md", help="where to write the card (default: claims.md)")
    args = parser.parse_args(argv)
    from analysis.report import analyse, load_run

    try:
        analyses = [analyse([load_run(p)]) for p in args.runs]
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = card_rows(analyses)
    text = card_markdown(rows)
    Path(args.out).write_text(text)
    print(text)
    Path(args.out).with_suffix(".json").write_text(
        json.dumps(
            [
                {
                    "source": r["claim"].source,
                    "claim": r["claim"].text,
                    "verdict": r["verdict"],
                    "estimate": r["estimate"],
                    "run": r["run"],
                    "command": r["command"],
                }
                for r in rows
            ],
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
