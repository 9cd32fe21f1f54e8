"""The verdicts summary.md leads with, and its paired-comparison table, written from
`analysis.stats.paired`'s table (paired.csv).

One line per switch and pair of arms (`lead_pairs`: the scenario's first arm against each other
arm, or every pair when there are three arms or fewer), e.g.

    Switch 1 (cute → chuunibyou): sao − running_mean: −48 [−168, 72] episodes to the bar (paired t;
    bootstrap [−150, 60]), paired over 5 seeds; P(sao faster) = 0.40 [0.00, 0.80]; not resolved —
    resolvable at 5 seeds: 210 episodes; a 10% difference needs 140 seeds, 20% needs 36.

The first interval decides (the paired t interval, see analysis/stats/paired.py); "resolvable" is the
minimum detectable difference at 80% power and the run's number of seeds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.phases import switch_label
from analysis.results import Analysis
from analysis.stats import paired
from analysis.tables.markdown import md_table

LEAD_METRIC = "episodes_to_bar"
UNITS = {
    "episodes_to_bar": "episodes to the bar",
    "judge_calls_to_bar": "judge calls to the bar",
    "episodes_to_own_plateau": "episodes to the own plateau",
    "auc_after": "reward after the switch",
    "dip": "dip",
    "dynamic_regret": "dynamic regret",
    "auc": "reward area",
}
TABLE_METRICS = [
    ("switch", "episodes_to_bar"),
    ("switch", "auc_after"),
    ("switch", "episodes_to_own_plateau"),
    ("segment", "dynamic_regret"),
]
PAIRED_HEADER = [
    "X − Y",
    "metric",
    "over",
    "X − Y [paired t 95%]",
    "bootstrap 95%",
    "P(X better)",
    "seeds",
    "verdict",
    "resolvable",
    "seeds for 10% / 20%",
]


def lead_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """Every pair (in order) for three arms or fewer, else the first arm against each other."""
    if len(arms) <= 3:
        return [(x, y) for i, x in enumerate(arms) for y in arms[i + 1 :]]
    return [(arms[0], y) for y in arms[1:]]


def num(x: float, digits: int = 0) -> str:
    """A number with a true minus sign (never '−0'); '-' when undefined."""
    if x is None or not np.isfinite(x):
        return "-"
    text = f"{x:.{digits}f}"
    if text.startswith("-") and float(text) == 0:
        text = text[1:]
    return text.replace("-", "−")


def seeds_text(n: float, cap: int = paired.SEED_CAP) -> str:
    if n is None or np.isnan(n):
        return "-"
    return f">{cap}" if np.isinf(n) else f"{int(n)}"


def _digits(metric: str) -> int:
    return 0 if metric.startswith(("episodes", "judge_calls")) else 3


def _faster(metric: str) -> str:
    return "faster" if metric.startswith(("episodes", "judge_calls")) else "better"


def _seeds_phrase(r: pd.Series) -> str:
    if r["pairing"] == paired.PAIRED:
        return f"paired over {int(r['n'])} seeds"
    return f"unpaired (Welch) over {int(r['n_x'])} and {int(r['n_y'])} seeds"


def verdict_text(r: pd.Series) -> str:
    """'not resolved', or '<arm> faster' / '<arm> better'."""
    if str(r["verdict"]).startswith("none:"):  # neither arm reached the bar on some seeds
        return "no verdict (" + str(r["verdict"]).removeprefix("none: ") + ")"
    if not bool(r["resolved"]):
        return "not resolved"
    return str(r["verdict"]).replace(" better", " " + _faster(r["metric"]))


def verdict_line(r: pd.Series, styles: tuple | str | None = None) -> str:
    """One row of paired.csv as the sentence summary.md leads with (see the module docstring).
    `styles`: the switch's (from, to) styles, or its label (`realign.switch_label`)."""
    m, d = r["metric"], _digits(r["metric"])
    head = f"{'Switch' if r['unit'] == 'switch' else 'Segment'} {r['task']}"
    if isinstance(styles, str):
        head += f" ({styles.replace(' -> ', ' → ')})"
    elif styles and all(styles):
        head += f" ({styles[0]} → {styles[1]})"
    if not np.isfinite(r["diff"]):
        return f"{head}: {r['arm_x']} − {r['arm_y']}: no seeds to compare."
    if max(int(r["n_x"]), int(r["n_y"])) < 2:  # one seed per arm: a difference, but no spread to judge it by
        return (
            f"{head}: {r['arm_x']} − {r['arm_y']}: {num(r['diff'], d)} {UNITS.get(m, m)} with one seed: no "
            "interval, nothing resolved (run more seeds)."
        )
    unit = "episodes" if m.startswith("episodes") else "judge calls" if m.startswith("judge_calls") else ""
    kind = "paired t" if r["pairing"] == paired.PAIRED else "Welch t"
    boot = f"; bootstrap [{num(r['boot_lo'], d)}, {num(r['boot_hi'], d)}]" if np.isfinite(r["boot_lo"]) else ""
    parts = [
        f"{head}: {r['arm_x']} − {r['arm_y']}: {num(r['diff'], d)} [{num(r['diff_lo'], d)}, "
        f"{num(r['diff_hi'], d)}] {UNITS.get(m, m)} ({kind}{boot}), {_seeds_phrase(r)}",
        f"P({r['arm_x']} {_faster(m)}) = {num(r['p_better'], 2)} [{num(r['p_better_lo'], 2)}, "
        f"{num(r['p_better_hi'], 2)}]",
        f"{verdict_text(r)} — resolvable at {int(r['n'])} seeds: {num(r['mde'], d)}{' ' + unit if unit else ''}",
        f"a 10% difference needs {seeds_text(r['seeds_10pct'])} seeds, 20% needs {seeds_text(r['seeds_20pct'])}",
    ]
    return "; ".join(parts) + "."


def _styles(per_seed: pd.DataFrame) -> dict:
    if per_seed.empty or "switch" not in per_seed:
        return {}
    first = per_seed.drop_duplicates("switch").set_index("switch")
    if not first[["from_style", "to_style"]].notna().all(axis=None):
        return {k: (first.loc[k, "from_style"], first.loc[k, "to_style"]) for k in first.index}
    return {k: switch_label(first.loc[k]) for k in first.index}


def lead_lines(a: Analysis, metric: str = LEAD_METRIC) -> list[str]:
    """The verdict lines for every switch and lead pair, then where the bar came from."""
    table = a.paired
    if table is None or table.empty:
        return []
    rows = table[
        (table["unit"] == "switch") & (table["metric"] == metric) & (table["task"].astype(str) != paired.POOLED)
    ]
    styles = _styles(a.per_seed)
    lines = []
    for x, y in lead_pairs(a.arm_order or list(dict.fromkeys(table["arm_x"]))):
        for _, r in rows[(rows["arm_x"] == x) & (rows["arm_y"] == y)].iterrows():
            lines.append((int(r["task"]), verdict_line(r, styles.get(r["task"]))))
    out = [f"- {line}" for _, line in sorted(lines, key=lambda kv: kv[0])]
    if out:
        out.append("")
        out.append(bar_note(a))
    return out


def bar_note(a: Analysis) -> str:
    """Where the bar came from, and how to read the lines."""
    sources = set(a.per_seed["bar_source"].dropna()) if "bar_source" in a.per_seed else set()
    if sources == {"reference"}:
        bar = "the reference policy's reward on the new target (the seed's SFT policy prompted with it only)"
    elif "reference" in sources:
        bar = "the reference policy's reward where the run has it, else the best pre-switch plateau of the seed's arms"
    else:
        bar = "the best pre-switch plateau of the seed's arms (no reference table in this run)"
    return (
        f"The bar: {a.fraction} × {bar}, the same for every arm of a seed; a seed that never reaches it "
        'counts at the phase\'s length (censored). Intervals: 95%, the first one decides; "resolvable": the '
        "smallest difference detected with 80% power at this many seeds. Every pair and metric: paired.csv."
    )


def paired_rows(a: Analysis) -> list[list[str]]:
    """The paired table's rows for the lead pairs and TABLE_METRICS, per switch or segment and pooled."""
    table = a.paired
    if table is None or table.empty:
        return []
    from analysis.metrics.nonstationary import over_label

    out = []
    for x, y in lead_pairs(a.arm_order or list(dict.fromkeys(table["arm_x"]))):
        for unit, metric in TABLE_METRICS:
            sel = table[
                (table["arm_x"] == x) & (table["arm_y"] == y) & (table["unit"] == unit) & (table["metric"] == metric)
            ]
            d = _digits(metric)
            for _, r in sel.iterrows():
                out.append(
                    [
                        f"{x} − {y}",
                        UNITS.get(metric, metric),
                        over_label(unit, r["task"], r["tasks"]),
                        f"{num(r['diff'], d)} [{num(r['diff_lo'], d)}, {num(r['diff_hi'], d)}]",
                        f"[{num(r['boot_lo'], d)}, {num(r['boot_hi'], d)}]",
                        f"{num(r['p_better'], 2)} [{num(r['p_better_lo'], 2)}, {num(r['p_better_hi'], 2)}]",
                        f"{r['pairing']} {int(r['n'])}",
                        verdict_text(r),
                        num(r["mde"], d),
                        f"{seeds_text(r['seeds_10pct'])} / {seeds_text(r['seeds_20pct'])}",
                    ]
                )
    return out


def paired_markdown(a: Analysis) -> list[str]:
    """summary.md's section of paired comparisons (empty without a second arm)."""
    rows = paired_rows(a)
    if not rows:
        return []
    return [
        "## Paired comparisons (per-seed differences)",
        "",
        md_table(PAIRED_HEADER, rows),
        "",
        "- **X − Y**: the mean over seeds of the per-seed difference (the arms of a seed share its SFT policy); "
        "the interval that decides is the paired Student-t one (a percentile bootstrap over five seeds "
        "under-covers); the paired bootstrap (one resample of seeds for both arms) is shown beside it. "
        "Arms of different runs are compared unpaired (Welch).",
        "- **P(X better)**: the share of seeds where X beats Y (ties half), bootstrap interval. "
        "**resolvable**: the smallest difference detected with 80% power at two-sided 5% with this many seeds "
        "((t(0.975, n-1) + t(0.8, n-1)) × sd of the differences / √n); **seeds for 10% / 20%**: the seeds a "
        "difference of 10% / 20% of Y's mean would need at the observed spread.",
        "- Regret is against the reference policy where the run has a reference table, else the best arm "
        "(segments_by_seed.csv, `regret_against`); pooled over the segments after switches (not segment 0).",
        "",
    ]
