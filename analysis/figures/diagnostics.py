"""Trainer and critic diagnostics from the updates table (see `analysis.figures.plots` for the list)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure

from analysis.figures.style import FAMILY_COLORS, FAMILY_ORDER, arm_palette, legend_right, mean_lineplot, panel_grid

TRAINING_PANELS = [
    ("policy_loss", "policy loss"),
    ("policy_grad_norm", "policy gradient norm"),
    ("grad_norm", "gradient norm (before clipping)"),
    ("entropy", "policy entropy (nats / token)"),
    ("approx_kl", "approx. KL to rollout policy"),
    ("dis_masked_frac", "DIS: masked token fraction"),
    ("advantage_abs_mean", "mean |advantage|"),
    ("staleness_mean", "staleness (policy versions)"),
]


# Clock values per diagnostics line: a full run has ~190 updates per arm and seed, and every x value
# is one seaborn bootstrap per panel and arm; 60 bins (100 episodes each in a 6,000-episode run)
# are finer than the 5-update rolling mean that the lines already are.
DIAGNOSTIC_POINTS = 60


# Explained variance explodes negatively on a batch whose rewards are (almost) all equal (its
# variance ~0): one such update would drag a rolling mean far below the curve, so it takes medians.
MEDIAN_SMOOTHED = ("value_explained_variance",)


def _smooth(updates: pd.DataFrame, cols: list[str], span: int = 5, points: int = DIAGNOSTIC_POINTS) -> pd.DataFrame:
    """Each arm and seed's rolling mean over `span` updates (rolling median for MEDIAN_SMOOTHED),
    its clock rounded onto a grid of at most `points` values (mean_lineplot then averages a seed's
    updates within a bin)."""
    medians = [c for c in cols if c in MEDIAN_SMOOTHED]
    means = [c for c in cols if c not in MEDIAN_SMOOTHED]
    parts = []
    for _, g in updates.sort_values("t").groupby(["arm", "seed"], sort=True):
        g = g.copy()
        g[means] = g[means].rolling(span, min_periods=1).mean()
        g[medians] = g[medians].rolling(span, min_periods=1).median()
        parts.append(g)
    if not parts:
        return updates
    data = pd.concat(parts, ignore_index=True)
    step = max(1.0, float(data["t"].max()) / points)
    return data.assign(t=(data["t"] / step).round() * step)


def _numeric_present(updates: pd.DataFrame, col: str) -> bool:
    return col in updates and pd.api.types.is_numeric_dtype(updates[col]) and updates[col].notna().any()


def training_figure(
    updates: pd.DataFrame | None,
    switch_points: Sequence[int],
    budget: int,
    palette: dict[str, str] | None = None,
    title: str | None = None,
) -> Figure | None:
    """Trainer diagnostics per arm over the drift clock (rolling mean of 5 updates; 95% band
    over seeds); the panels are the columns of `TRAINING_PANELS` the updates table has."""
    if updates is None or updates.empty or "t" not in updates:
        return None
    panels = [(c, lab) for c, lab in TRAINING_PANELS if _numeric_present(updates, c)]
    if not panels:
        return None
    arms = sorted(updates["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    data = _smooth(updates, [c for c, _ in panels])
    fig, axes = panel_grid(len(panels), title=title or "Trainer diagnostics (rolling mean of 5 updates)")
    for ax, (col, label) in zip(axes, panels):
        mean_lineplot(ax, data, "t", col, "arm", arms, palette, linewidth=1.3, legend=ax is axes[0])
        for s in switch_points:
            ax.axvline(s, color="#333333", ls="--", lw=0.9)
        ax.set_title(label, loc="left", fontsize=9)
        ax.set_xlabel("training episodes (t)")
        ax.set_ylabel("")
        ax.set_xlim(0, budget)
    handles, labels = axes[0].get_legend_handles_labels() if axes else ([], [])
    if axes and axes[0].get_legend() is not None:
        axes[0].get_legend().remove()  # seaborn's, inside the first panel: the figure has one legend
    if handles:
        fig.legend(handles, labels, title="arm", loc="outside right upper", fontsize=8, title_fontsize=8)
    return fig


def _family_long(updates: pd.DataFrame, prefix: str) -> pd.DataFrame:
    cols = {f"{prefix}grad_norm_{f}": f for f in FAMILY_ORDER if _numeric_present(updates, f"{prefix}grad_norm_{f}")}
    if not cols:
        return pd.DataFrame()
    data = _smooth(updates[["arm", "seed", "t", *cols]], list(cols))
    long = data.melt(id_vars=["arm", "seed", "t"], value_vars=list(cols), var_name="family", value_name="norm")
    return long.assign(family=long["family"].map(cols)).dropna(subset=["norm"])


def critic_figure(
    updates: pd.DataFrame | None,
    switch_points: Sequence[int],
    budget: int,
    palette: dict[str, str] | None = None,
    title: str | None = None,
) -> Figure | None:
    """Critic diagnostics, drawn only for the columns present: value explained variance, critic
    loss, gradient norms by module family (policy_/critic_grad_norm_<family>; colour = family,
    line style = arm) and MoE expert load (*expert_load_cv, *expert_load_peak)."""
    if updates is None or updates.empty or "t" not in updates:
        return None
    arms = sorted(updates["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    scalar = [
        (c, lab)
        for c, lab in [("value_explained_variance", "value explained variance"), ("critic_loss", "critic (value) loss")]
        if _numeric_present(updates, c)
    ]
    families = [(p, _family_long(updates, p)) for p in ("policy_", "critic_")]
    families = [(p, d) for p, d in families if not d.empty]
    load_cols = [
        c for c in updates.columns if ("expert_load" in c or "load_balance" in c) and _numeric_present(updates, c)
    ]
    n = len(scalar) + len(families) + (1 if load_cols else 0)
    if n == 0:
        return None
    fig, axes = panel_grid(
        n, ncols=2, w=5.2, h=3.1, title=title or "Critic and module diagnostics (rolling mean of 5 updates; EV: median)"
    )
    it = iter(axes)
    smooth = _smooth(updates, [c for c, _ in scalar] + load_cols)
    for col, label in scalar:
        ax = next(it)
        mean_lineplot(ax, smooth, "t", col, "arm", arms, palette, linewidth=1.3)
        if col == "value_explained_variance":
            ax.axhline(0, color="#999999", lw=0.8)
            ax.set_ylim(max(-1.05, float(smooth[col].min()) - 0.05), 1.05)
        ax.set_title(label, loc="left", fontsize=9)
        legend_right(ax, "arm")
    for prefix, long in families:
        ax = next(it)
        fams = [f for f in FAMILY_ORDER if f in set(long["family"])]
        mean_lineplot(
            ax,
            long,
            "t",
            "norm",
            "family",
            fams,
            FAMILY_COLORS,
            style="arm" if long["arm"].nunique() > 1 else None,
            linewidth=1.3,
        )
        if (long["norm"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(f"{prefix.rstrip('_')} gradient norm by module family", loc="left", fontsize=9)
        legend_right(ax)
    if load_cols:
        ax = next(it)
        long = smooth[["arm", "seed", "t", *load_cols]].melt(
            id_vars=["arm", "seed", "t"], value_vars=load_cols, var_name="measure", value_name="load"
        )
        mean_lineplot(ax, long, "t", "load", "measure", style="arm" if len(arms) > 1 else None, linewidth=1.3)
        ax.set_title("expert load (cv: 0 = balanced; peak: 1 = balanced)", loc="left", fontsize=9)
        legend_right(ax)
    for ax in axes:
        for s in switch_points:
            ax.axvline(s, color="#333333", ls="--", lw=0.9)
        ax.set_xlabel("training episodes (t)")
        ax.set_ylabel("")
        ax.set_xlim(0, budget)
    return fig
