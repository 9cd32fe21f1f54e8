"""The stopping rule of a staged study (testbed/cli/study_command.py), fixed in the protocol before the runs.

After stage k every claim is looked at over all seeds so far (`look`): decided when its paired t
test, or its TOST against the claim's margin, is under alpha / (number of planned stages) (Bonferroni
over the looks: the chance of a false verdict over all looks stays under alpha), else open with the
planner's estimate of the seeds its margin needs at that level. `next_stage_fits` says whether the
next stage runs: some claim is open, its estimate fits the protocol's last stage, and the budget
holds the next stage's core-hours.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analysis.claims import _pooled
from analysis.power import pooled_tables, sd_interval
from analysis.protocol import Claim, Protocol
from analysis.stats.tests import seeds_needed, t_pvalue, tost_pvalue


def spent_core_hours(runs: Sequence[Any]) -> tuple[float, int]:
    """(core-hours of every arm x seed in the runs' manifests, seeds run)."""
    seconds, seeds = 0.0, set()
    for run in runs:
        for arm_seeds in (run.manifest.get("arms") or {}).values():
            for seed, totals in arm_seeds.items():
                if isinstance(totals, dict):
                    seconds += float(totals.get("cpu_s") or totals.get("wall_s") or 0.0)
                    seeds.add((run.name, seed))
    return seconds / 3600, len({s for _, s in seeds})


def look_at(claim: Claim, table: Any, protocol: Protocol) -> dict[str, Any]:
    """One claim over the seeds so far: decided (supported / contradicted / equivalent) or open."""
    out: dict[str, Any] = {"claim": claim.id}
    if claim.not_testable:
        return {**out, "status": "not testable"}
    row = _pooled(table, claim)
    if row is None or not np.isfinite(row["se_diff"]):
        return {**out, "status": "open", "n": 0 if row is None else int(row["n"]), "seeds_needed": float("nan")}
    level = protocol.look_alpha
    se, df, diff = float(row["se_diff"]), float(row["n"]) - 1, float(row["diff"])
    margin = claim.margin_value(float(row["mean_y"]))
    p, p_tost = t_pvalue(diff, se, df), tost_pvalue(diff, se, df, margin)
    if p < level:
        x_better = diff < 0 if claim.lower_is_better else diff > 0
        status = "supported" if x_better else "contradicted"
    elif p_tost < level:
        status = "equivalent"
    else:
        status = "open"
    sd = float(row["sd_diff"])
    return {
        **out,
        "status": status,
        "n": int(row["n"]),
        "diff": diff,
        "diff_lo": float(row["diff_lo"]),
        "diff_hi": float(row["diff_hi"]),
        "p": p,
        "p_tost": p_tost,
        "level": level,
        "margin": margin,
        "seeds_needed": seeds_needed(sd, margin, level, protocol.power),
        "seeds_needed_hi": seeds_needed(sd_interval(sd, int(row["n"]))[1], margin, level, protocol.power),
    }


def look(stage_dirs: Sequence[str | Path], claims: Sequence[Claim], protocol: Protocol) -> dict[str, Any]:
    """Every claim over the seeds of the stages so far, and what they cost."""
    switches, segments, runs = pooled_tables(stage_dirs)
    tables = {"switch": switches, "segment": segments}
    looks = [look_at(c, tables[c.unit], protocol) for c in claims]
    spent, seeds = spent_core_hours(runs)
    lines = [
        f"  {r['claim']}: {r['status']}"
        + (
            f" (n={r['n']}, difference {r['diff']:.3g} [{r['diff_lo']:.3g}, {r['diff_hi']:.3g}], p {r['p']:.3g}, "
            f"TOST p {r['p_tost']:.3g} at level {r['level']:.3g}; the margin needs ~{r['seeds_needed']:.0f} seeds)"
            if "diff" in r
            else ""
        )
        for r in looks
    ]
    lines.append(f"  {seeds} seeds so far, {spent:.2f} core-hours")
    return {"seeds": seeds, "core_hours": spent, "claims": looks, "lines": lines}


def next_stage_fits(result: dict[str, Any], protocol: Protocol, k: int) -> tuple[bool, str]:
    """Whether stage k + 1 runs, and why not."""
    if k >= len(protocol.stages):
        return False, "the protocol's last stage ran"
    open_ = [c for c in result["claims"] if c["status"] == "open"]
    if not open_:
        return False, "every claim is decided"
    last = protocol.stages[-1]
    reachable = [c for c in open_ if not np.isfinite(c.get("seeds_needed", np.nan)) or c["seeds_needed"] <= last]
    if not reachable:
        needs = ", ".join(f"{c['claim']} ~{c['seeds_needed']:.0f}" for c in open_)
        return False, f"the open claims need more seeds than the protocol's {last}: {needs}"
    per_seed = result["core_hours"] / max(1, result["seeds"])
    next_cost = per_seed * (protocol.stages[k] - protocol.stages[k - 1])
    if result["core_hours"] + next_cost > protocol.budget_core_hours:
        return False, (
            f"the budget: {result['core_hours']:.1f} core-hours spent, the next stage ~{next_cost:.1f} more, "
            f"over the protocol's {protocol.budget_core_hours:g}"
        )
    return True, ""


def study_markdown(state: dict[str, Any], claims: Sequence[Claim]) -> str:
    lines = [f"# Study of {state['scenario']}", ""]
    lines += [f"Claims: {', '.join(c.id for c in claims)}. Status: {state['status']}"]
    if state.get("stopped_because"):
        lines[-1] += f" ({state['stopped_because']})"
    for k, stage in enumerate(state["stages"], start=1):
        lines += ["", f"## Stage {k}: {stage['seeds']} seeds, {stage['core_hours']:.2f} core-hours", ""]
        lines += [line.strip() for line in stage["lines"][:-1]]
    return "\n".join(lines) + "\n"
