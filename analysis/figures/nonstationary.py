"""Figures of the non-stationary metrics (analysis/metrics/nonstationary.py), drawn from the report's
tables: intervals are rliable's, so they are drawn as given rather than re-estimated by seaborn.
Every function returns a matplotlib `Figure`, or None when there is nothing to draw.

  segment_figure      per segment and arm: reward area and dynamic regret, points at the mean
                      over seeds with rliable's 95% interval, dots = seeds; what the regret is
                      against (the reference policy's reward, mean over seeds, or the best
                      plateau) dashed over the reward-area panel.
  improvement_figure  per metric (episodes to the bar, dynamic regret): P(X better than Y) for
                      every ordered pair of arms, pooled over switches or segments, as an arms x
                      arms map (blue: X better), with the 95% interval in each cell up to six arms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.figures.style import arm_palette, new_figure
from analysis.metrics import nonstationary

CMAP = sns.color_palette("vlag_r", as_cmap=True)  # blue: X better, white: even, red: Y better
SEGMENT_PANELS = [
    ("auc", "reward area: mean reward over the segment"),
    ("dynamic_regret", "dynamic regret per episode (reference - reward)"),
]


def _interval(ax, x: float, mean: float, lo: float, hi: float, color: str) -> None:
    """A point at the mean and a bar over [lo, hi] (no bar where there is no interval)."""
    if not np.isfinite(mean):
        return
    if np.isfinite(lo) and np.isfinite(hi):
        ax.vlines(x, lo, hi, color=color, lw=2.2, zorder=3)
    ax.plot([x], [mean], "o", color=color, markersize=7, zorder=4)


def segment_figure(
    segments: pd.DataFrame, intervals: pd.DataFrame, palette: dict[str, str] | None = None, title: str | None = None
) -> Figure | None:
    """Reward area and dynamic regret per segment and arm (see the module docstring)."""
    if segments is None or segments.empty or intervals is None or intervals.empty:
        return None
    iv = intervals[(intervals["unit"] == "segment") & (intervals["task"].astype(str) != nonstationary.POOLED)]
    if iv.empty:
        return None
    info = segments.drop_duplicates("segment").set_index("segment").sort_index()
    keys = list(info.index)
    labels = [
        f"segment {k}: {info.loc[k, 'target_style']}\n(t {info.loc[k, 'start']}-{info.loc[k, 'end']})" for k in keys
    ]
    arms = sorted(iv["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    width = 0.8 / max(1, len(arms))
    rng = np.random.default_rng(0)  # the seeds' jitter, the same in every drawing
    fig, axes = new_figure(1, 2, 11, 3.8)
    for ax, (metric, label) in zip(axes[0], SEGMENT_PANELS):
        for j, arm in enumerate(arms):
            for i, k in enumerate(keys):
                x = i - 0.4 + width * (j + 0.5)
                row = iv[(iv["arm"] == arm) & (iv["task"] == k) & (iv["metric"] == metric)]
                if not row.empty:
                    r = row.iloc[0]
                    _interval(ax, x, r["mean"], r["mean_lo"], r["mean_hi"], palette[arm])
                seeds = segments[(segments["arm"] == arm) & (segments["segment"] == k)][metric].dropna()
                ax.plot(
                    x + rng.uniform(-0.25, 0.25, len(seeds)) * width,
                    seeds,
                    "o",
                    color="#222222",
                    markersize=3,
                    alpha=0.6,
                    zorder=5,
                )
        if metric == "auc":
            col = "reference_reward" if "reference_reward" in segments else "best_plateau"
            against = segments.groupby("segment")[col].mean()
            for i, k in enumerate(keys):
                ax.hlines(against.get(k, np.nan), i - 0.45, i + 0.45, color="#222222", lw=1.4, ls="--", zorder=2)
            ax.set_ylim(-0.02, 1.05)
            ax.set_ylabel("reward")
        else:
            ax.axhline(0.0, color="#555555", lw=1, zorder=1)
            ax.set_ylabel("reward per episode")
        ax.set_xticks(range(len(keys)), labels, fontsize=7.5)
        ax.set_xlim(-0.5, len(keys) - 0.5)
        ax.grid(False, axis="x")
        ax.set_title(label, loc="left", fontsize=9)
    handles = [Line2D([], [], color=palette[a], marker="o", lw=2.2) for a in arms]
    handles += [
        Line2D([], [], color="#222222", marker="o", markersize=3, lw=0, alpha=0.6),
        Line2D([], [], color="#222222", lw=1.4, ls="--"),
    ]
    fig.legend(
        handles,
        [*arms, "seeds", "regret reference"],
        title="arm",
        loc="outside right upper",
        fontsize=8,
        title_fontsize=8,
    )
    fig.suptitle(
        title or "Per segment: mean over seeds with rliable's stratified-bootstrap 95% interval", fontweight="bold"
    )
    return fig


def improvement_figure(improvement: pd.DataFrame, title: str | None = None) -> Figure | None:
    """P(X better than Y) per metric as an arms x arms map (see the module docstring)."""
    if improvement is None or improvement.empty:
        return None
    order = [m for m in nonstationary.IMPROVEMENT_METRICS.values() if m in set(improvement["metric"])]
    metrics = order + sorted(set(improvement["metric"]) - set(order))
    arms = sorted(set(improvement["arm_x"]) | set(improvement["arm_y"]), key=str)
    k = len(arms)
    with_ci = k <= 6  # past six arms the cells are too small for the interval's text
    cell = 0.95 if with_ci else 0.55
    fig, axes = new_figure(1, len(metrics), len(metrics) * (cell * k + 2.4), cell * k + 1.9)
    labels = {
        nonstationary.IMPROVEMENT_METRICS["switch"]: "episodes to recover",
        nonstationary.IMPROVEMENT_METRICS["segment"]: "dynamic regret",
    }
    for ax, metric in zip(axes[0], metrics):
        rows = improvement[improvement["metric"] == metric]
        pooled = rows[rows["task"].astype(str) == nonstationary.POOLED]
        shown = pooled if not pooled.empty else rows  # one switch or segment: its rows are the pool
        p = np.full((k, k), np.nan)  # the diagonal and pairs without values stay blank
        for _, r in shown.iterrows():
            p[arms.index(r["arm_x"]), arms.index(r["arm_y"])] = r["p_improvement"]
        # imshow rather than seaborn's heatmap, which calls a colormap method matplotlib deprecates
        image = ax.imshow(np.ma.masked_invalid(p), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
        for _, r in shown.iterrows():
            i, j = arms.index(r["arm_x"]), arms.index(r["arm_y"])
            if not np.isfinite(r["p_improvement"]):
                continue
            ci = (
                f"\n[{r['p_improvement_lo']:.2f}, {r['p_improvement_hi']:.2f}]"
                if with_ci and np.isfinite(r["p_improvement_lo"])
                else ""
            )
            ax.text(
                j,
                i,
                f"{r['p_improvement']:.2f}{ci}",
                ha="center",
                va="center",
                fontsize=7 if with_ci else 6,
                color="#ffffff" if abs(r["p_improvement"] - 0.5) > 0.3 else "#222222",
            )
        fig.colorbar(image, ax=ax, label="P(X better than Y)", shrink=0.8)
        ax.set_xticks(range(k), arms, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(k), arms, fontsize=8)
        ax.grid(False)
        ax.set_ylabel("X (row)")
        ax.set_xlabel("Y (column)")
        r0 = shown.iloc[0]
        over = nonstationary.over_label(r0["unit"], r0["task"], r0["tasks"])
        ax.set_title(f"{labels.get(metric, metric)} ({r0['better']} is better)\nover {over}", loc="left", fontsize=9)
    fig.suptitle(
        title or "Probability of improvement: P(X better than Y) (rliable; brackets: 95% interval)", fontweight="bold"
    )
    return fig
