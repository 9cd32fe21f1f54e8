"""What every figure shares: colours, the figure factory, seaborn's mean line with its 95% band,
phase shading and legends (Agg backend; nothing here touches pyplot's global state).

Colours: `arm_palette` gives each arm the same colour in every figure (known trainers have fixed
colours), `style_palette` each style likewise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # a notebook's inline backend is left alone
    matplotlib.use("Agg")

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.typing import RcKeyType

from analysis.metrics import realign

# ----------------------------------------------------------------------------------------------
# colours

STYLE_ORDER = ["cute", "chuunibyou", "classical", "academic", "plain", "mixed"]
STYLE_COLORS = {
    "cute": "#e7298a",  # pink
    "chuunibyou": "#7570b3",  # violet
    "classical": "#a6761d",  # ochre
    "academic": "#1b9e77",  # teal
    "plain": "#666666",  # grey
    "mixed": "#bbbbbb",  # light grey
}
_ARM_BASE = sns.color_palette("tab10").as_hex()
ARM_COLORS = {"sao": _ARM_BASE[0], "running_mean": _ARM_BASE[1], "grpo": _ARM_BASE[2], "rloo": _ARM_BASE[3]}
FAMILY_COLORS = {"attention": "#4c72b0", "experts": "#dd8452", "router": "#55a868", "other": "#8c8c8c"}
FAMILY_ORDER = ["attention", "experts", "router", "other"]
UNKNOWN_COLOR = "#999999"  # a phase whose target no table records

RC: dict[RcKeyType, Any] = {"figure.dpi": 110, "savefig.dpi": 110, "axes.titleweight": "bold", "legend.frameon": False}


def arm_palette(arms: Sequence[str]) -> dict[str, str]:
    """A colour per arm, stable across figures: known trainer names (also as the last part of a
    'run:arm' label) keep their fixed colour when it is free; other arms take the next free
    tab10 colour in the order given."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for arm in arms:
        preferred = ARM_COLORS.get(str(arm).split(":")[-1])
        if preferred and preferred not in used:
            out[arm] = preferred
            used.add(preferred)
    spare = [c for c in _ARM_BASE + sns.color_palette("Set2").as_hex() if c not in used]
    for arm in arms:
        if arm not in out:
            out[arm] = spare.pop(0) if spare else "#333333"
    return out


def style_palette(styles: Sequence[str]) -> dict[str, str]:
    """A colour per style: fixed for the world's styles, Dark2 colours for others."""
    extra = iter(c for c in sns.color_palette("Dark2", 8).as_hex() if c not in STYLE_COLORS.values())
    return {s: STYLE_COLORS.get(s) or next(extra, "#333333") for s in styles}


def ordered_styles(styles: Sequence[str]) -> list[str]:
    known = [s for s in STYLE_ORDER if s in set(styles)]
    return known + sorted(set(styles) - set(known))


def new_figure(nrows: int, ncols: int, width: float, height: float, **kw):
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9), matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


ERRORBAR = ("ci", 95)  # seaborn's percentile bootstrap over seeds
# Seaborn resamples in a Python loop per x value, so the draws cost time linearly. 100 are enough
# for a band over a handful of seeds: with 3 seeds a resampled mean takes one of only 10 values,
# and the all-lowest (all-highest) one has probability 1/27 > 2.5%, so the 95% band's ends are
# the extreme values in nearly every set of 100 draws; seaborn's default of 1000 buys nothing.
N_BOOT = 100


def mean_lineplot(
    ax,
    data: pd.DataFrame,
    x: str,
    y: str,
    hue: str,
    hue_order: Sequence | None = None,
    palette: dict | None = None,
    style: str | None = None,
    unit: str = "seed",
    legend: bool = True,
    **line_kw,
) -> None:
    """Mean of y over `unit` (seeds) at each x, per hue (and line style per `style`), with seaborn's
    95% bootstrap band. Rows are first averaged within a unit at each x, so that every seed
    counts once however many rows it has there (e.g. two clocks rounded to one judge-call bin)."""
    if data is None or data.empty:
        return
    keys = [k for k in dict.fromkeys((hue, style, x, unit)) if k and k in data]
    data = data.dropna(subset=[y]).groupby(keys, as_index=False, sort=False)[y].mean()
    present = set(data[hue])
    hues = [h for h in (hue_order if hue_order is not None else sorted(present, key=str)) if h in present]
    if not hues:
        return
    palette = {h: (palette or {}).get(h) or c for h, c in zip(hues, sns.color_palette("tab10", len(hues)).as_hex())}
    if "marker" in line_kw:
        line_kw.setdefault("markersize", 3)
    sns.lineplot(
        data=data,
        x=x,
        y=y,
        hue=hue,
        hue_order=hues,
        palette=palette,
        style=style,
        errorbar=ERRORBAR,
        n_boot=N_BOOT,
        seed=0,
        ax=ax,
        legend="auto" if legend else False,
        **line_kw,
    )


def shade_phases(
    ax, switch_points: Sequence[int], budget: int, targets: Sequence[str | None], label: bool = True
) -> None:
    """Tint every phase of the schedule (from its switch points, whether or not anything was
    measured in it) with its target style's colour, grey where the target is unknown; dash the
    switches, and (label=True) name the target at the top of the panel."""
    bounds = realign.phase_bounds(switch_points, budget)
    pal = style_palette([t for t in targets if t])
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        style = targets[i] if i < len(targets) else None
        ax.axvspan(a, b, color=pal[style] if style else UNKNOWN_COLOR, alpha=0.07, lw=0, zorder=0)
        if style and label:
            ax.text(
                (a + b) / 2,
                1.0,
                f"target: {style}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=8,
                color=pal[style],
                fontweight="bold",
            )
    for s in switch_points:
        ax.axvline(s, color="#333333", ls="--", lw=1, zorder=1)


def legend_right(ax, title: str | None = None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    if handles:
        ax.legend(
            handles, labels, title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title_fontsize=8
        )


def panel_grid(n: int, ncols: int = 3, w: float = 4.2, h: float = 2.9, title: str | None = None):
    ncols = min(ncols, n)
    nrows = int(np.ceil(n / ncols))
    fig, axes = new_figure(nrows, ncols, w * ncols + 1.5, h * nrows + 0.6)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig, flat[:n]
