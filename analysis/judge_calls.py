"""Judge calls per judge, for a run whose schedule changes the judge (its episodes carry a `judge`
column; testbed/envs/schedules/judge_drift.py): per arm and judge, the training episodes each judge
scored and the calls each judge answered (the `judge_calls_<name>` counters of updates.parquet:
training and held-out evaluation from the start of RL; the reference policy and a warm-up are not
in them). Pure functions of the run's tables."""

from __future__ import annotations

import pandas as pd

from analysis.tables.markdown import md_table

COLUMNS = ["run", "arm", "judge", "seeds", "episodes", "judge_calls"]
PREFIX = "judge_calls_"


def judge_calls(runs: list) -> pd.DataFrame:
    """One row per run, arm and judge (columns `COLUMNS`), summed over seeds; empty for runs whose
    episodes name no judge."""
    rows = []
    for run in runs:
        episodes = run.episodes
        if episodes.empty or "judge" not in episodes:
            continue
        scored = episodes[episodes["judge"].notna()]
        calls = _last_counters(run.updates)
        for (arm, judge), g in scored.groupby(["arm", "judge"], sort=True):
            mine = calls[calls["arm"] == arm] if not calls.empty else calls
            column = f"{PREFIX}{judge}"
            total = float(mine[column].sum()) if column in mine else float("nan")
            rows.append(
                {
                    "run": run.name,
                    "arm": arm,
                    "judge": judge,
                    "seeds": int(g["seed"].nunique()),
                    "episodes": len(g),
                    "judge_calls": total,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def _last_counters(updates: pd.DataFrame) -> pd.DataFrame:
    """Each arm x seed's last update row (its counters are cumulative)."""
    if updates.empty or not {"arm", "seed", "update"} <= set(updates.columns):
        return pd.DataFrame(columns=["arm", "seed"])
    return updates.sort_values("update").groupby(["arm", "seed"], sort=True).tail(1)


def judge_calls_markdown(table: pd.DataFrame) -> list[str]:
    """The summary.md section (nothing for runs without judge changes)."""
    if table.empty:
        return []
    several = table["run"].nunique() > 1
    body = [
        [
            *([str(r.run)] if several else []),
            str(r.arm),
            str(r.judge),
            str(r.seeds),
            str(r.episodes),
            "-" if pd.isna(r.judge_calls) else f"{r.judge_calls:.0f}",
        ]
        for r in table.itertuples()
    ]
    header = [*(["run"] if several else []), "arm", "judge", "seeds", "training episodes", "judge calls"]
    return [
        "## Judges",
        "",
        md_table(header, body),
        "",
        "The schedule changes the judge: training episodes each judge scored, and the calls each judge answered "
        "(training and held-out evaluation from the start of RL, summed over seeds: the `judge_calls_<name>` "
        "columns of updates.parquet). A switch that keeps the target and changes the judge reads "
        "'style, judge A -> B'; the old style's share metrics do not apply to it ('-').",
        "",
    ]
