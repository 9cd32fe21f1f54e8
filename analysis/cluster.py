"""What the simulated cluster did to each arm (runtime.kind: simulated; the episode rows carry
`sim_start_s`, `sim_done_s`, `sim_trained_s`): staleness, drops, DIS masking and the share its own
correction (DIS, PPO clip, TIS, MIS, the sequence mask) acted on, the expert mismatch of its fresh
episodes (`engine.mismatch: true`), the requeue bias and realignment in simulated seconds beside
episodes, with intervals over seeds.

- **Requeue bias**: the share of long responses (at least the run's 75th percentile of judged response tokens)
  among the episodes trained on, against among those generated and judged. Drop-and-requeue
  throws away the long, slow rollouts that went stale, so the first can fall below the second.
- **Realignment in seconds**: `episodes_to_bar` (analysis/metrics/realign.py, on the report's bar: the
  reference table's) measured on the simulated clock: the seconds from the judging of the switch's
  first episode to that of the episode that reached the bar (a censored switch counts to the end of
  its follow-up, as in episodes). With a schedule in simulated seconds each arm x seed switches at
  its own episode (the manifest's per-arm `switch_points`), and its realignment is measured from it.
- **Paired comparisons**: episodes and seconds to the bar, arm against arm seed by seed, per switch
  and pooled, with `analysis.stats.paired`'s intervals (the report's for episodes).

    python -m analysis.cluster RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.metrics import realign
from analysis.run_data import RunData, load_run
from analysis.stats import paired
from analysis.stats.bootstrap import bootstrap_mean
from analysis.tables.markdown import md_table

SIM_COLUMNS = ("sim_start_s", "sim_done_s")
FIGURES = {
    "staleness_mean": "staleness of trained episodes (mean)",
    "stale_share": "trained with staleness > 0 (share)",
    "dropped_share": "judged episodes dropped as too stale (share)",
    "dis_masked": "DIS-masked tokens (share, mean over updates)",
    "corrected": "tokens the arm's correction masked, truncated or clipped (share, mean over updates)",
    "expert_diff": "fresh tokens routed otherwise than the trainer in >= 1 layer (share, mean over updates)",
    "router_diff": "fresh (token, layer) routers disagreeing with the trainer's (share, mean over updates)",
    "long_trained": "long responses among trained (share)",
    "long_generated": "long responses among generated (share)",
    "episodes_to_bar": "episodes to the bar (mean over switches)",
    "seconds_to_bar": "simulated seconds to the bar (mean over switches)",
    "sim_hours": "simulated hours for the budget",
}


def is_simulated(run: RunData) -> bool:
    return not run.episodes.empty and all(c in run.episodes for c in SIM_COLUMNS)


def judged_times(ok: pd.DataFrame) -> pd.Series:
    """Each judged episode's simulated judging time by its clock t (`sim_judged_s`: a GRPO group is
    judged at its last member's completion; older runs have only `sim_done_s`, each member's own)."""
    return ok.set_index("t")["sim_judged_s" if "sim_judged_s" in ok else "sim_done_s"].sort_index()


def seconds_between(ok: pd.DataFrame, start: int, episodes: float) -> float:
    """Simulated seconds from the judging of episode `start` to that of `start + episodes - 1`."""
    if not np.isfinite(episodes):
        return float("nan")
    done = judged_times(ok)
    if start not in done.index:
        return float("nan")
    end = done.index[done.index <= start + int(episodes) - 1].max()
    return float(done.loc[end] - done.loc[start])


def switch_table(run: RunData) -> pd.DataFrame:
    """`realign.switch_metrics` per arm, seed and switch (each pair at its own switch episodes),
    with `seconds_to_bar` and `switch_s`, the simulated time the switch's first episode was judged."""
    ep = run.episodes
    ok = ep[ep["judge_error"].isna()]
    table = realign.switch_metrics(ep, run.switches, run.budget, run.evals, run.updates, reference=run.reference)
    seconds, at = [], []
    for r in table.itertuples():
        mine = ok[(ok["arm"] == r.arm) & (ok["seed"] == r.seed)]
        seconds.append(seconds_between(mine, int(r.t), r.episodes_to_bar))
        done = judged_times(mine)
        at.append(float(done.loc[int(r.t)]) if int(r.t) in done.index else float("nan"))
    return table.assign(seconds_to_bar=seconds, switch_s=at)


def paired_switches(switches: pd.DataFrame, arms: list[str] | None = None) -> pd.DataFrame:
    """Episodes and seconds to the bar, every pair of arms, per switch and pooled (analysis.stats.paired).

    A seed where neither arm reached the bar gives no difference: each value is its own follow-up,
    and with switches in simulated seconds each arm meets a switch at its own episode, so the two
    follow-ups differ by where the switch fell, not by realignment. Such a comparison keeps its
    interval but gets no verdict; `both_censored` counts those seeds (paired.both_censored_apart)."""
    return paired.paired_table(switches, ["episodes_to_bar", "seconds_to_bar"], "switch", arms=arms)


def paired_markdown(table: pd.DataFrame) -> str:
    """X - Y per metric and switch: the paired t interval that decides, the seeds and the verdict."""
    body = [
        [
            f"{r.arm_x} - {r.arm_y}",
            r.metric,
            str(r.task),
            f"{r.diff:.4g} [{r.diff_lo:.4g}, {r.diff_hi:.4g}]",
            f"{r.pairing} {int(r.n)}",
            r.verdict,
        ]
        for r in table.itertuples()
    ]
    return md_table(["X - Y", "metric", "switch", "diff [95%]", "seeds", "verdict"], body)


# Each correction's share of the action tokens it acted on (trainers/losses.py): an arm logs one.
CORRECTION_SHARES = ("dis_masked_frac", "clip_frac", "tis_truncated_frac", "mis_masked_frac", "seq_masked_frac")


def mean_of(updates: pd.DataFrame, column: str) -> float:
    """The column's mean over the updates that have it (nan when none has)."""
    values = pd.to_numeric(updates[column], errors="coerce").dropna() if column in updates else pd.Series(dtype=float)
    return float(values.mean()) if len(values) else float("nan")


def correction_share(updates: pd.DataFrame) -> float:
    """The share of tokens the arm's correction masked, truncated or clipped, mean over its updates."""
    return next((v for v in (mean_of(updates, c) for c in CORRECTION_SHARES) if np.isfinite(v)), float("nan"))


def per_seed(run: RunData, switches: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per arm x seed of the figures in `FIGURES` (`switches`: `switch_table(run)`)."""
    ep = run.episodes
    ok = ep[ep["judge_error"].isna()]
    long_cut = ok["response_tokens"].quantile(0.75)
    switches = switch_table(run) if switches is None else switches
    rows = []
    for (arm, seed), mine in ok.groupby(["arm", "seed"]):
        trained = mine[mine["trained"].astype(bool)]
        up = run.updates[(run.updates["arm"] == arm) & (run.updates["seed"] == seed)]
        sw = switches[(switches["arm"] == arm) & (switches["seed"] == seed)]
        seconds = sw["seconds_to_bar"].to_numpy(float)
        rows.append(
            {
                "arm": arm,
                "seed": seed,
                "staleness_mean": trained["staleness"].mean(),
                "stale_share": (trained["staleness"] > 0).mean(),
                "dropped_share": float((mine["staleness"].notna() & ~mine["trained"].astype(bool)).mean()),
                "dis_masked": up["dis_masked_frac"].mean() if "dis_masked_frac" in up else float("nan"),
                "corrected": correction_share(up),
                "expert_diff": mean_of(up, "mismatch_expert_diff"),
                "router_diff": mean_of(up, "mismatch_router_diff"),
                "long_trained": (trained["response_tokens"] >= long_cut).mean(),
                "long_generated": (mine["response_tokens"] >= long_cut).mean(),
                "episodes_to_bar": sw["episodes_to_bar"].mean(),
                "seconds_to_bar": float(np.nanmean(seconds)) if np.isfinite(seconds).any() else float("nan"),
                "sim_hours": mine["sim_done_s"].max() / 3600,
                "staleness_histogram": trained["staleness"].value_counts().sort_index().to_dict(),
            }
        )
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame, reps: int = 2000, confidence: float = 0.95) -> pd.DataFrame:
    """Per arm: each figure's mean over seeds and its bootstrap interval (`lo`, `hi`)."""
    rows = []
    for arm, mine in table.groupby("arm", sort=False):
        row: dict = {"arm": arm, "seeds": len(mine)}
        for name in FIGURES:
            values = mine[name].dropna().to_numpy(dtype=float)
            row[name] = values.mean() if len(values) else float("nan")
            lo, hi = bootstrap_mean(values, reps, confidence, seed=0) if len(values) > 1 else (np.nan, np.nan)
            row[f"{name}_lo"], row[f"{name}_hi"] = lo, hi
        histogram: dict = {}
        for h in mine["staleness_histogram"]:
            for k, v in h.items():
                histogram[int(k)] = histogram.get(int(k), 0) + v
        total = sum(histogram.values()) or 1
        row["staleness_histogram"] = " ".join(f"{k}:{v / total:.2f}" for k, v in sorted(histogram.items()))
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(summary_table: pd.DataFrame) -> str:
    """The per-arm table, each figure as `mean [lo, hi]`."""

    def cell(row: pd.Series, name: str) -> str:
        value, lo, hi = row[name], row[f"{name}_lo"], row[f"{name}_hi"]
        if not np.isfinite(value):
            return "-"
        return f"{value:.3g} [{lo:.3g}, {hi:.3g}]" if np.isfinite(lo) else f"{value:.3g}"

    header = ["figure", *summary_table["arm"].astype(str)]
    body = [[label, *(cell(r, name) for _, r in summary_table.iterrows())] for name, label in FIGURES.items()]
    body.append(["staleness histogram (trained)", *summary_table["staleness_histogram"]])
    body.append(["seeds", *(str(int(s)) for s in summary_table["seeds"])])
    return md_table(header, body)


def report_section(runs: list[RunData], out: Path) -> str:
    """The report's section for the runs with simulated arms (written also to `cluster.csv`); "" if none."""
    tables, sections = [], []
    for run in filter(is_simulated, runs):
        name = run.name or run.path.name
        switches = switch_table(run)
        table = summary(per_seed(run, switches))
        tables.append(table.assign(run=name))
        title = f" ({name})" if len(runs) > 1 else ""
        pairs = paired_switches(switches, run.arm_order())
        sections.append(f"## Simulated cluster{title}\n\n{markdown(table)}\n\n{paired_markdown(pairs)}\n")
    if not tables:
        return ""
    pd.concat(tables).to_csv(out / "cluster.csv", index=False)
    note = (
        "Mean over seeds [95% bootstrap interval]. Long responses: at least the run's 75th percentile of "
        "judged response tokens. Seconds to the bar: simulated, from the switch's first judged episode "
        "(analysis/cluster.py).\n"
    )
    return "\n" + "\n".join(sections) + "\n" + note


def switch_points_markdown(switches: pd.DataFrame) -> str:
    """Where each arm x seed met each switch, and its time to the bar in episodes and seconds."""
    body = [
        [
            str(r.arm),
            str(r.seed),
            str(r.switch),
            str(r.t),
            f"{r.switch_s:.1f}",
            f"{r.episodes_to_bar:.0f}{' (censored)' if r.censored else ''}",
            f"{r.seconds_to_bar:.1f}",
        ]
        for r in switches.itertuples()
    ]
    return md_table(["arm", "seed", "switch", "episode", "judged at s", "episodes to bar", "seconds to bar"], body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories with simulated arms")
    args = parser.parse_args(argv)
    for path in args.runs:
        run = load_run(path)
        if not is_simulated(run):
            print(f"{path}: no simulated arms (runtime.kind: simulated)", file=sys.stderr)
            return 2
        switches = switch_table(run)
        print(f"## {path.name}\n\n{markdown(summary(per_seed(run, switches)))}\n")
        print(f"Switches (episode, simulated s) per arm x seed:\n\n{switch_points_markdown(switches)}\n")
        print(f"Paired, seed by seed:\n\n{paired_markdown(paired_switches(switches, run.arm_order()))}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
