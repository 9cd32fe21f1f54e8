"""The short ending a finished run prints on the console (`brief_lines`): where the report is, one
line per switch with the paired verdict on episodes to the bar, and each arm's final reward. The
full tables stay in summary.md; `python -m analysis.report RUN_DIR` (or `testbed.run --verbose`)
prints them. Every line fits `WIDTH` columns: a longer one is folded with an indent."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.results import Analysis
from analysis.stats import paired
from analysis.tables.verdicts import LEAD_METRIC, lead_pairs, num

WIDTH = 120


def fold(line: str, width: int = WIDTH) -> list[str]:
    """`line` as lines of at most `width` columns, continuation lines indented; a path longer than
    that stays whole on a line of its own (it must stay copyable)."""
    return textwrap.wrap(line, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def files_line(out: Path, figures: list[Path]) -> str:
    """The report's files: summary.md, the figures (the realignment figure first) and the CSVs."""
    names = sorted((p.name for p in figures), key=lambda n: (n != "realignment.png", n))
    shown = f"figures/ ({len(names)}: {names[0]} first)" if names else "no figures"
    csvs = len(list(out.glob("*.csv")))
    return f"report in {out}: summary.md (every table), {shown}, {csvs} CSV tables"


def _pair_phrase(r: pd.Series) -> tuple[str, str]:
    """(kind, phrase) of one pair's verdict: 'resolved' with the difference, 'open' or 'none'."""
    x, y = r["arm_x"], r["arm_y"]
    if str(r["verdict"]).startswith("none:"):  # neither arm reached the bar on some seeds
        return "none", f"{x} vs {y} ({str(r['verdict']).removeprefix('none: ')})"
    if not bool(r["resolved"]):
        return "open", f"{x} vs {y}"
    faster = str(r["verdict"]).removesuffix(" better")  # episodes: fewer is better
    slower = y if faster == x else x
    lo, hi = sorted((abs(r["diff_lo"]), abs(r["diff_hi"])))  # the interval excludes 0: one sign
    return "resolved", f"{faster} faster than {slower} by {num(abs(r['diff']))} [{num(lo)},\N{NO-BREAK SPACE}{num(hi)}]"


def switch_line(head: str, rows: pd.DataFrame, arms: int) -> str:
    """One switch's verdicts on episodes to the bar over the lead pairs, or why there is none."""
    if arms < 2:
        return f"{head}: one arm, nothing to compare"
    if rows.empty:
        return f"{head}: no paired comparison"
    if rows[["n_x", "n_y"]].max().max() < 2:
        return f"{head}: one seed: no verdict"
    said: dict[str, list[str]] = {"resolved": [], "open": [], "none": []}
    for _, r in rows.iterrows():
        kind, phrase = _pair_phrase(r)
        said[kind].append(phrase)
    parts = said["resolved"]
    if said["open"] and parts:  # named in full in summary.md; here only how many
        others = len(said["open"])
        parts.append(f"the {'other pair' if others == 1 else f'{others} other pairs'} not resolved")
    elif said["open"]:
        parts.append("no pair resolved" if len(said["open"]) > 1 else f"not resolved ({said['open'][0]})")
    if said["none"]:
        parts.append("no verdict: " + ", ".join(said["none"]))
    return f"{head}: " + "; ".join(parts)


def verdict_header(rows: pd.DataFrame) -> list[str]:
    """What the switch lines compare, once: the metric, the seeds and how they are paired."""
    if rows.empty or rows[["n_x", "n_y"]].max().max() < 2:
        return []
    pairing = "paired" if (rows["pairing"] == paired.PAIRED).all() else "unpaired (Welch)"
    return [
        f"verdicts on episodes to the bar after each switch, {pairing} over {int(rows['n'].max())} seeds "
        "(95% intervals; in full: summary.md):"
    ]


def switch_lines(a: Analysis) -> list[str]:
    """One line per switch of the run (first run's switches), verdicts of the lead pairs."""
    ps = a.per_seed
    if ps.empty or "switch" not in ps:
        return []
    table = a.paired
    rows = (
        table[(table["unit"] == "switch") & (table["metric"] == LEAD_METRIC)]
        if table is not None and not table.empty
        else pd.DataFrame(columns=["task", "arm_x", "arm_y", "n", "n_x", "n_y", "pairing"])
    )
    rows = rows[rows["task"].astype(str) != paired.POOLED]
    arms = a.arm_order or list(dict.fromkeys(ps["arm"]))
    pairs = lead_pairs(arms)
    rows = pd.concat([rows[(rows["arm_x"] == x) & (rows["arm_y"] == y)] for x, y in pairs]) if pairs else rows.iloc[:0]
    lines = verdict_header(rows)
    for switch, g in ps.groupby("switch", sort=True):
        first = g.iloc[0]
        head = f"switch {switch} ({first['from_style']} → {first['to_style']} at t={int(first['t'])})"
        lines.append(switch_line(head, rows[rows["task"].astype(str) == str(switch)], len(arms)))
    return lines


def reward_line(a: Analysis) -> str:
    """Each arm's final reward: the mean over seeds of its last `window` judged episodes."""
    arms = a.arms.set_index("arm")
    order = [x for x in (a.arm_order or []) if x in arms.index] or list(arms.index)
    window = int(arms["window"].iloc[0]) if "window" in arms else None
    seeds = int(arms["seeds"].max())
    said = ", ".join(
        f"{arm} {num(arms.loc[arm, 'final_reward'], 2)}" for arm in order if np.isfinite(arms.loc[arm, "final_reward"])
    )
    over = f"last {window} episodes" + (f", mean over {seeds} seeds" if seeds > 1 else "")
    return f"final reward ({over}): {said}"


def brief_lines(a: Analysis, out: Path, figures: list[Path]) -> list[str]:
    """The run's ending on the console, each line at most WIDTH columns."""
    if a.arms.empty:
        lines = [files_line(out, figures), "no episodes recorded"]
    else:
        lines = [files_line(out, figures), *switch_lines(a), reward_line(a)]
    return [part for line in lines for part in fold(line)]
