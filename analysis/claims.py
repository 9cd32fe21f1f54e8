"""A card of the SAO paper's claims that the testbed can test, with its verdict on each.

    python -m analysis.claims RUN_DIR [RUN_DIR ...] [--out claims.md] [--protocol FILE]

The claims, their primary endpoints, tasks and margins are the protocol's (analysis/protocol.yaml),
fixed before the runs. Each claim names two arms (X is claimed better than Y) and the scenario whose
run holds both; the card finds, among the runs given, a run of that scenario (a run of another
scenario never stands in) and compares the arms paired, seed by seed (`analysis.stats.paired`; the
arms of a seed share its SFT policy), on the claim's task: by default each seed's mean over the
switches (or the segments after them).

Verdict, from the paired Student-t test of X - Y, adjusted across the card's claims by Holm's method
(a card of eleven claims tests eleven hypotheses; the adjusted p-value is what the verdict reads):
  supported       Holm-adjusted p < alpha and the difference lies on the side the claim says;
  contradicted    Holm-adjusted p < alpha on the other side;
  equivalent      two one-sided tests (TOST, Holm-adjusted too) put the difference inside +-margin,
                  the smallest difference the protocol says matters;
  not resolved    neither: the card gives the seeds the margin would need, with the interval the
                  pilot sd's uncertainty gives, so "not resolved" is never read as "no difference";
  not testable    the protocol says why the arms cannot differ where the claim runs, or (a claim
                  marked `ratio_dependent`) the run found never moved the importance ratio, so
                  its arms were one design run twice;
  not run         no run given holds both arms: the card gives the command that would.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.power import sd_interval
from analysis.protocol import DEFAULT_PROTOCOL, ENDPOINTS, Claim, Protocol, ProtocolError, load_protocol
from analysis.stats import paired
from analysis.stats.tests import holm, seeds_needed, t_pvalue, tost_pvalue
from analysis.tables.verdicts import num, seeds_text

METRIC_NAMES = {name: (label, unit) for name, (_, label, unit, _) in ENDPOINTS.items()}


def claims_of(protocol: Protocol | None = None) -> list[Claim]:
    return list((protocol or load_protocol()).claims)


CLAIMS: list[Claim] = claims_of()


def _pooled(table: pd.DataFrame, claim: Claim) -> pd.Series | None:
    """The paired comparison X - Y on the claim's task (a row of paired.PAIRED_COLUMNS)."""
    if table is None or table.empty or claim.endpoint not in table:
        return None
    rows = paired.paired_table(table, [claim.endpoint], claim.unit, arms=[claim.x, claim.y])
    if rows.empty:
        return None
    chosen = rows[rows["task"].astype(str) == claim.task]
    return (chosen if not chosen.empty else rows).iloc[0]


def tests_of(row: pd.Series, claim: Claim) -> dict[str, float]:
    """The claim's p-value (t test of X - Y = 0), its TOST p-value within +-margin, the margin."""
    se, df = float(row["se_diff"]), float(row["n"]) - 1
    margin = claim.margin_value(float(row["mean_y"]))
    return {
        "p": t_pvalue(float(row["diff"]), se, df),
        "p_tost": tost_pvalue(float(row["diff"]), se, df, margin),
        "margin": margin,
    }


def verdict_of(row: pd.Series, claim: Claim, p_holm: float, p_tost_holm: float, alpha: float) -> str:
    """supported / contradicted / equivalent / not resolved, from the Holm-adjusted tests."""
    if str(row["verdict"]).startswith("none:"):  # neither arm reached the bar on some seeds
        return "no verdict: " + str(row["verdict"]).removeprefix("none: ")
    if np.isfinite(p_holm) and p_holm < alpha:
        x_better = row["diff"] < 0 if claim.lower_is_better else row["diff"] > 0
        return "supported" if x_better else "contradicted"
    if np.isfinite(p_tost_holm) and p_tost_holm < alpha:
        return "equivalent"
    return "not resolved at this power"


def estimate_text(row: pd.Series, claim: Claim, tests: dict[str, float], protocol: Protocol) -> str:
    name, unit = METRIC_NAMES[claim.endpoint]
    digits = 3 if unit.startswith("reward") else 0
    text = (
        f"{name}, {claim.x} − {claim.y}: {num(row['diff'], digits)} [{num(row['diff_lo'], digits)}, "
        f"{num(row['diff_hi'], digits)}] {unit}, {row['pairing']} over {int(row['n'])} seeds; "
        f"P({claim.x} better) = {row['p_better']:.2f}; p = {tests['p']:.3g} (Holm {tests['p_holm']:.3g})"
    )
    sd, n = float(row["sd_diff"]), int(row["n"])
    lo, hi = sd_interval(sd, n)
    need = [seeds_needed(s, tests["margin"], protocol.alpha, protocol.power) for s in (sd, lo, hi)]
    if not (np.isfinite(tests["p_holm"]) and tests["p_holm"] < protocol.alpha):
        text += f"; resolvable: {num(row['mde'], digits)}"
    return text + (
        f"; margin ±{num(tests['margin'], digits)} ({claim.margin}): TOST p {tests['p_tost']:.3g} "
        f"(Holm {tests['p_tost_holm']:.3g}); the margin needs {seeds_text(need[0])} seeds "
        f"[{seeds_text(need[1])}, {seeds_text(need[2])}] (sd's 95% interval)"
    )


def scenario_name(a: Any) -> str:
    """The scenario a run was made from (the manifest's `scenario`, else the run's name)."""
    return str(a.runs[0].manifest.get("scenario") or a.runs[0].name)


def _find(analyses: list, claim: Claim) -> tuple[Any, pd.Series | None] | None:
    """A run of the claim's own scenario that holds both arms: the protocol fixes where a claim is
    judged, so a run of another scenario never stands in (nor enters Holm's family twice)."""
    own = Path(claim.scenario).stem
    for a in analyses:
        if scenario_name(a) == own and {claim.x, claim.y} <= set(a.arm_order):
            table = a.per_seed if claim.unit == "switch" else a.segments
            return a, _pooled(table, claim)
    return None


# An update's approx_kl (k3, trainers/losses.py) below this is float rounding: the HF engine and the
# trainer agree to ~1e-13 on the same weights, while one version of staleness or a dense bf16
# cluster's mismatch gives 1e-5 and more (docs/simulated.md).
FLAT_KL = 1e-8


def ratio_flat(a: Any, claim: Claim) -> str | None:
    """Why the run cannot tell a `ratio_dependent` claim's arms apart (the importance ratio stayed
    at 1 through every update of both arms), or None when it moved or the run holds no updates."""
    tables = [getattr(r, "updates", None) for r in getattr(a, "runs", [])]
    tables = [t for t in tables if isinstance(t, pd.DataFrame) and {"arm", "approx_kl"} <= set(t.columns)]
    if not tables:
        return None
    updates = pd.concat(tables)
    kl = pd.to_numeric(updates.loc[updates["arm"].isin([claim.x, claim.y]), "approx_kl"], errors="coerce").dropna()
    if kl.empty or float(kl.abs().max()) >= FLAT_KL:
        return None
    return (
        f"the importance ratio stayed at 1 in {a.runs[0].name} (largest approx_kl {float(kl.abs().max()):.1e} over "
        f"{len(kl)} updates of {claim.x} and {claim.y}): on-policy rollouts from an exact engine, so the arms are one "
        "design run twice; it needs staleness or engine-trainer mismatch (the simulated cluster)"
    )


def _where(a: Any) -> tuple[str, str]:
    run = a.runs[0]
    commit = str(run.manifest.get("git_commit") or run.manifest.get("commit") or "")[:7]
    numerics = (run.manifest.get("numerics") or {}).get("mode", "")
    command = run.manifest.get("command") or f"python -m testbed.run scenarios/{scenario_name(a)}.yaml"
    command += " --set numerics=native" if numerics == "native" and "numerics=" not in command else ""
    names = ", ".join(r.name for r in a.runs)
    pooled = f" (pooled over {len(a.runs)} runs of other seeds: {names})" if len(a.runs) > 1 else ""
    return f"{run.name} (commit {commit or '?'}, numerics {numerics or '?'}){pooled}", command


def card_rows(analyses: list, protocol: Protocol | None = None) -> list[dict]:
    """One dict per claim: claim, verdict, estimate, run, command (and the tests behind the
    verdict). Holm's adjustment runs over the claims that have a value in the runs given."""
    protocol = protocol or load_protocol()
    found: dict[str, tuple[Any, pd.Series, dict[str, float]]] = {}
    flat: dict[str, str] = {}  # claim id -> why its run cannot tell its arms apart
    for claim in protocol.claims:
        hit = None if claim.not_testable else _find(analyses, claim)
        reason = ratio_flat(hit[0], claim) if hit is not None and claim.ratio_dependent else None
        if reason:
            flat[claim.id] = reason
        elif hit is not None and hit[1] is not None:
            found[claim.id] = (hit[0], hit[1], tests_of(hit[1], claim))
    ids = list(found)
    for key, adjusted in (
        ("p_holm", holm([found[i][2]["p"] for i in ids])),
        ("p_tost_holm", holm([found[i][2]["p_tost"] for i in ids])),
    ):
        for i, value in zip(ids, adjusted):
            found[i][2][key] = value
    out = []
    for claim in protocol.claims:
        if claim.not_testable:
            verdict, estimate, run = "not testable", claim.not_testable, ""
            command = claim.command
        elif claim.id in flat:
            verdict, estimate, run, command = "not testable in this runtime", flat[claim.id], "", claim.command
        elif claim.id not in found:
            verdict, estimate, run, command = "not run", "no run given holds both arms", "", claim.command
        else:
            a, row, tests = found[claim.id]
            verdict = verdict_of(row, claim, tests["p_holm"], tests["p_tost_holm"], protocol.alpha)
            estimate = estimate_text(row, claim, tests, protocol)
            run, command = _where(a)
        out.append({"claim": claim, "verdict": verdict, "estimate": estimate, "run": run, "command": command})
    return out


def card_markdown(rows: list[dict], alone: dict[str, list[dict]] | None = None) -> str:
    """The card; `alone`: for a scenario whose runs were pooled, each run's own rows (the pooled
    verdict never hides what a run said by itself)."""
    lines = [
        "# Claims card",
        "",
        "The paper's claims the testbed can test, each with its verdict on the runs given "
        "(`python -m analysis.claims`; the claims, endpoints and margins are analysis/protocol.yaml's, fixed "
        "before the runs). Paired over the seeds the arms share, each seed's mean over the switches (or "
        "segments); interval: paired Student-t 95%; verdicts Holm-adjusted across the claims, equivalence by "
        "TOST within the margin.",
        "",
        *_table(rows),
    ]
    for name, own in (alone or {}).items():
        lines += ["", f"Run {name} on its own (its seeds only):", "", *_table(own)]
    lines += [
        "",
        "Not on the card: whether a critic changes the Goodhart surface (`scenarios/goodhart.yaml`; the "
        "report's goodhart.csv gives the gap per arm and phase, not yet a paired per-seed metric).",
    ]
    return "\n".join(lines) + "\n"


def _table(rows: list[dict]) -> list[str]:
    lines = ["| source | claim | verdict | estimate [95% interval] | run | reproduce |", "|---|---|---|---|---|---|"]
    for r in rows:
        c = r["claim"]
        lines.append(
            f"| {c.source} | {c.text} | **{r['verdict']}** | {r['estimate']} | {r['run']} | `{r['command']}` |"
        )
    return lines


class Pooled:
    """Runs of one scenario with other seeds, analysed as one (analysis/power.pooled_tables)."""

    def __init__(self, paths: list[str]):
        from analysis.power import pooled_tables

        self.per_seed, self.segments, self.runs = pooled_tables(paths)
        self.arm_order = list(dict.fromkeys(self.per_seed["arm"])) if "arm" in self.per_seed else []


def analyses_of(paths: list[str]) -> tuple[list[Any], dict[str, list[Any]]]:
    """The runs grouped by scenario: one Pooled per scenario, and each pooled run on its own."""
    from analysis.run_data import load_run

    groups: dict[str, list[str]] = {}
    for path in paths:
        run = load_run(path)
        groups.setdefault(str(run.manifest.get("scenario") or run.name), []).append(path)
    pooled = [Pooled(group) for group in groups.values()]
    alone = {Path(p).name: [Pooled([p])] for group in groups.values() if len(group) > 1 for p in group}
    return pooled, alone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (runs of one scenario with other seeds are pooled)")
    parser.add_argument("--out", default="claims.md", help="where to write the card (default: claims.md)")
    parser.add_argument("--protocol", default=str(DEFAULT_PROTOCOL))
    args = parser.parse_args(argv)
    try:
        protocol = load_protocol(args.protocol)
        analyses, alone = analyses_of(args.runs)
    except (FileNotFoundError, ValueError, ProtocolError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = card_rows(analyses, protocol)
    text = card_markdown(rows, {name: card_rows(a, protocol) for name, a in alone.items()})
    Path(args.out).write_text(text)
    print(text)
    Path(args.out).with_suffix(".json").write_text(
        json.dumps(
            [
                {
                    "id": r["claim"].id,
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
