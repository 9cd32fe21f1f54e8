"""Seaborn figures of a run's realignment (Agg backend; every function returns a matplotlib
`Figure`, or None when the run has nothing to draw, and never touches pyplot's global state).

  realignment_figure   the paper's Figure 5: held-out style shares over time (one panel per arm)
                       above the rolling training reward per arm with 95% bands over seeds;
                       phases shaded in the target style's colour, switches dashed.
  target_share_figure  per arm: held-out share of the current target style, and held-out reward.
  speed_figure         realignment speed per arm and switch: bars = mean over seeds, whiskers =
                       bootstrap 95% interval, dots = seeds (episodes to the common bar, censored
                       seeds at the phase's length; the own-plateau metric beside it).
  judge_calls_figure   rolling training reward against cumulative judge calls, each arm starting
                       at its trainer's warm-up calls.
  training_figure      trainer diagnostics from the updates table (loss, gradient norm, entropy,
                       KL, masked fraction, |advantage|), whichever columns are present.
  critic_figure        critic diagnostics where present: value explained variance, critic loss,
                       gradient norms by module family for policy and critic, expert load.

Colours, the mean line with its band and the phase shading are shared through
`analysis.figures.style`; the two diagnostics figures live in `analysis.figures.diagnostics`, the
non-stationary metrics' (segments, probability of improvement) in `analysis.figures.nonstationary`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.figures.diagnostics import critic_figure, training_figure
from analysis.figures.style import (
    ERRORBAR,
    N_BOOT,
    arm_palette,
    legend_right,
    mean_lineplot,
    new_figure,
    ordered_styles,
    panel_grid,
    shade_phases,
    style_palette,
)
from analysis.metrics import curves, realign

__all__ = [
    "arm_palette",
    "critic_figure",
    "judge_calls_figure",
    "realignment_figure",
    "speed_figure",
    "style_palette",
    "switch_labels",
    "target_share_figure",
    "training_figure",
]

# ----------------------------------------------------------------------------------------------
# figures over time


def realignment_figure(
    episodes: pd.DataFrame,
    evals: pd.DataFrame | None,
    switch_points: Sequence[int],
    budget: int,
    window: int | None = None,
    title: str | None = None,
    palette: dict[str, str] | None = None,
) -> Figure | None:
    """Held-out style shares (one panel per arm, when there are evaluations) over the rolling
    training reward per arm (mean over seeds, 95% bootstrap band)."""
    if episodes is None or episodes.empty:
        return None
    window = realign.auto_window(switch_points, budget, window)
    arms = sorted(episodes["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    shares = curves.share_curves(evals) if evals is not None else pd.DataFrame()
    share_arms = [a for a in arms if not shares.empty and (shares["arm"] == a).any()]
    targets = realign.phase_targets(episodes, evals, switch_points, budget)
    n = len(share_arms) + 1
    fig, axes = new_figure(n, 1, 10, 2.6 * len(share_arms) + 3.2, sharex=True)
    axes = axes[:, 0]
    styles = ordered_styles(shares["style"].unique()) if not shares.empty else []
    spal = style_palette(styles)
    for ax, arm in zip(axes, share_arms):
        data = shares[shares["arm"] == arm]
        mean_lineplot(ax, data, "t", "share", "style", styles, spal, marker="o")
        shade_phases(ax, switch_points, budget, targets, label=ax is axes[0])
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("held-out share")
        seeds = data["seed"].nunique()
        ax.set_title(f"Held-out style shares - {arm} ({seeds} seed{'s' if seeds != 1 else ''})", loc="left", pad=14)
        legend_right(ax, "style")
    ax = axes[-1]
    curve = curves.reward_curve(episodes, window)
    if not curve.empty:
        seeds = curve["seed"].nunique()
        mean_lineplot(ax, curve, "t", "rolling_reward", "arm", arms, palette, linewidth=1.8)
    shade_phases(ax, switch_points, budget, targets, label=not share_arms)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, budget)
    ax.set_ylabel(f"training reward\n(rolling mean, {window} episodes)")
    ax.set_xlabel("training episodes (drift clock t)")
    seeds = episodes["seed"].nunique()
    band = "mean over seeds, 95% bootstrap band" if seeds > 1 else "one seed"
    ax.set_title(f"Training reward per arm ({band})", loc="left", pad=14 if not share_arms else 4)
    legend_right(ax, "arm")
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


def target_share_figure(
    evals: pd.DataFrame | None,
    switch_points: Sequence[int],
    budget: int,
    palette: dict[str, str] | None = None,
    title: str | None = None,
    targets: Sequence[str | None] | None = None,
) -> Figure | None:
    """Per arm: the held-out share of the style that is the target at each evaluation, and the
    held-out reward (mean over seeds with 95% band). The target changes at a switch, so each
    phase is its own segment: a line never joins the share of one target to the next's.
    `targets` (one per phase, e.g. from the episodes table) names the phases; by default they are
    read from the evaluations, and a phase without one is shaded grey."""
    curve = curves.target_share_curve(evals) if evals is not None else pd.DataFrame()
    if curve.empty:
        return None
    arms = sorted(curve["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    if targets is None:
        targets = realign.phase_targets(pd.DataFrame(), evals, switch_points, budget)
    phase = np.searchsorted(np.asarray(switch_points, dtype=float), curve["t"].to_numpy(float), side="right")
    curve = curve.assign(phase=phase)
    fig, axes = new_figure(2, 1, 10, 5.6, sharex=True)
    for ax, col, label in (
        (axes[0, 0], "target_share", "share of the current\ntarget style"),
        (axes[1, 0], "eval_reward", "held-out reward"),
    ):
        data = curve.dropna(subset=[col])
        for _, segment in data.groupby("phase"):
            mean_lineplot(ax, segment, "t", col, "arm", arms, palette, marker="o", legend=False)
        shade_phases(ax, switch_points, budget, targets, label=ax is axes[0, 0])
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(label)
        shown = [a for a in arms if (data["arm"] == a).any()]
        ax.legend(
            [Line2D([], [], color=palette[a], marker="o", markersize=3) for a in shown],
            shown,
            title="arm",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            title_fontsize=8,
        )
    axes[0, 0].set_title("Held-out prompts: share of the current target style", loc="left", pad=14)
    axes[1, 0].set_title("Held-out prompts: reward (quality x style match)", loc="left")
    axes[1, 0].set_xlabel("training episodes (drift clock t)")
    axes[1, 0].set_xlim(0, budget)
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


def judge_calls_figure(
    episodes: pd.DataFrame,
    updates: pd.DataFrame | None,
    switch_points: Sequence[int],
    budget: int,
    window: int | None = None,
    palette: dict[str, str] | None = None,
    title: str | None = None,
) -> Figure | None:
    """Rolling training reward against the cumulative judge calls of each arm (warm-up calls
    included: an arm starts where its first judged sample was spent); a dotted line in the arm's
    colour where it reached each switch."""
    if episodes is None or episodes.empty:
        return None
    window = realign.auto_window(switch_points, budget, window)
    curve = curves.judge_call_curve(episodes, updates, window)
    if curve.empty:
        return None
    arms = sorted(curve["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    fig, axes = new_figure(1, 1, 10, 3.8)
    ax = axes[0, 0]
    # a common grid of judge calls so that seeds can be banded
    step = max(1.0, float(curve["judge_calls"].max()) / curves.CURVE_POINTS)
    curve = curve.assign(judge_calls=(curve["judge_calls"] / step).round() * step)
    mean_lineplot(ax, curve, "judge_calls", "rolling_reward", "arm", arms, palette, linewidth=1.8)
    for arm in arms:
        g = curve[curve["arm"] == arm]
        for s in switch_points:
            near = g.loc[(g["t"] - s).abs().groupby(g["seed"]).idxmin()] if not g.empty else g
            if not near.empty and (near["t"] - s).abs().min() <= window:
                ax.axvline(float(near["judge_calls"].mean()), color=palette[arm], ls=":", lw=1.2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("judge calls (cumulative, warm-up and failed calls included)")
    ax.set_ylabel(f"training reward\n(rolling mean, {window} episodes)")
    ax.set_title("Training reward per judge call (dotted: target switches)", loc="left")
    legend_right(ax, "arm")
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


# ----------------------------------------------------------------------------------------------
# realignment speed


SPEED_PANELS = [
    ("episodes_to_bar", "episodes until the reward reaches the common bar (censored at the phase end)"),
    ("judge_calls_to_bar", "judge calls until the reward reaches the common bar"),
    ("dip", "dip: lowest rolling reward after the switch"),
    ("auc_after", "mean reward over the horizon after the switch"),
    ("episodes_to_own_plateau", "episodes until the reward reaches the arm's own plateau"),
    ("old_half_life", "old style's held-out share: half-life (episodes)"),
    ("crossover", "episodes until the new style's share passes the old"),
]
BAR_PANELS = ("episodes_to_bar", "judge_calls_to_bar")
REWARD_PANELS = ("dip", "auc_after")


def switch_labels(per_seed: pd.DataFrame) -> dict:
    """'run | 1: cute -> chuunibyou (t=2400)' per (run, switch) key."""
    out = {}
    cols = [c for c in ("run", "switch", "t", "from_style", "to_style", "from_judge", "to_judge") if c in per_seed]
    for _, r in per_seed[cols].drop_duplicates().iterrows():
        key = (r.get("run"), r["switch"]) if "run" in per_seed else (None, r["switch"])
        label = f"switch {r['switch']}: {realign.switch_label(r)}\n(t = {r['t']})"
        if "run" in per_seed and per_seed["run"].nunique() > 1:
            label = f"{r['run']}\n" + label
        out[key] = label
    return out


def _recovery_note(ax, seeds: pd.DataFrame, x: float, rotate: bool, own: bool) -> None:
    """'k/n reached' (the common bar) or 'k/n recovered' (the own plateau) at the foot of a bar, red
    when not every seed got there; the others count at the phase's length (censored)."""
    if own:
        n = int(seeds["status"].isin(["recovered", "not recovered"]).sum())
        k, word = int(seeds["recovered_own_plateau"].astype(bool).sum()), "recovered"
    else:
        n = int(seeds["episodes_to_bar"].notna().sum())
        k, word = int(seeds["reached_bar"].astype(bool).sum()), "reached"
    text = f"{k}/{n}\n{word}" if n else "n/a"
    if n and k < n:
        text += f"\ncensored at {int(seeds['follow_up'].max())}"
    ax.annotate(
        text,
        (x, 0),
        xytext=(0, 3),
        textcoords="offset points",
        ha="center",
        va="bottom",
        fontsize=7,
        color="#b00000" if k < n or not n else "#222222",
        rotation=90 if rotate else 0,
    )


def _speed_marks(
    ax, metric: str, per_seed: pd.DataFrame, summary: pd.DataFrame, keys: list, arms: list[str], palette: dict[str, str]
) -> None:
    """What seaborn does not draw: the reached / recovered count under the time-to bars, the
    pre-switch plateau over the dip and auc bars. Bars sit where seaborn dodges them."""
    width = 0.8 / max(1, len(arms))
    for j, arm in enumerate(arms):
        for i, key in enumerate(keys):
            x = i - 0.4 + width * (j + 0.5)
            sel = (per_seed["arm"] == arm) & (per_seed["_key"] == key)
            if metric in (*BAR_PANELS, "episodes_to_own_plateau") and sel.any():
                _recovery_note(ax, per_seed[sel], x, rotate=len(arms) > 2, own=metric == "episodes_to_own_plateau")
            ssel = (summary["arm"] == arm) & (summary["_key"] == key)
            if metric in REWARD_PANELS and "plateau" in summary and ssel.any():
                plateau = float(summary.loc[ssel, "plateau"].iloc[0])
                if np.isfinite(plateau):
                    ax.hlines(plateau, x - width * 0.45, x + width * 0.45, color=palette[arm], lw=2.2, ls=(0, (2, 1)))
    if metric in REWARD_PANELS:
        mark = Line2D([], [], color="#555555", lw=2.2, ls=(0, (2, 1)))
        ax.legend([mark], ["pre-switch plateau (dashed, arm colour)"], loc="upper right", fontsize=7)


def _with_keys(df: pd.DataFrame) -> pd.DataFrame:
    """The table with a `_key` column: (run, switch), run None for a single run."""
    runs = df["run"] if "run" in df else pd.Series([None] * len(df), index=df.index)
    return df.assign(_key=list(zip(runs, df["switch"])))


def speed_figure(
    per_seed: pd.DataFrame, summary: pd.DataFrame, palette: dict[str, str] | None = None, title: str | None = None
) -> Figure | None:
    """Per switch and arm: a bar at the mean over seeds with seaborn's bootstrap 95% whiskers,
    and a dot per seed. A seed that never reaches the bar (or its own plateau) counts at the phase's
    length (censored); those panels say how many seeds got there."""
    if per_seed is None or per_seed.empty:
        return None
    labels = switch_labels(per_seed)
    keys = list(labels)
    per_seed, summary = _with_keys(per_seed), _with_keys(summary)
    per_seed = per_seed.assign(_label=per_seed["_key"].map(labels))
    arms = sorted(per_seed["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    panels = [
        (m, lab) for m, lab in SPEED_PANELS if (m in per_seed and per_seed[m].notna().any()) or m == "episodes_to_bar"
    ]
    fig, axes = panel_grid(
        len(panels),
        ncols=2,
        w=5.6,
        h=3.2,
        title=title or "Realignment speed per switch (bars: mean over seeds; whiskers: bootstrap 95% CI; dots: seeds)",
    )
    order = [labels[k] for k in keys]
    for ax, (metric, label) in zip(axes, panels):
        data = per_seed.dropna(subset=[metric])
        if not data.empty:
            common = dict(
                data=data,
                x="_label",
                y=metric,
                hue="arm",
                order=order,
                hue_order=arms,
                palette=palette,
                ax=ax,
                legend=False,
            )
            sns.barplot(
                **common,
                errorbar=ERRORBAR,
                n_boot=N_BOOT,
                seed=0,
                alpha=0.75,
                capsize=0.15,
                err_kws={"color": "#222222", "linewidth": 1},
            )
            dark = dict.fromkeys(arms, "#222222")  # dodged by arm like the bars, but drawn dark on them
            sns.stripplot(
                **{**common, "palette": dark}, dodge=True, jitter=0.08 / max(1, len(arms)), size=4, linewidth=0
            )
        _speed_marks(ax, metric, per_seed, summary, keys, arms, palette)
        ax.grid(False, axis="x")
        ax.set_xticks(range(len(keys)), order, fontsize=7.5)
        ax.set_xlim(-0.5, len(keys) - 0.5)
        ax.set_xlabel("")
        ax.set_title(label, loc="left", fontsize=9)
        ax.set_ylim(0, 1.05) if metric in REWARD_PANELS else ax.set_ylim(bottom=0)
        ax.set_ylabel(
            {"dip": "reward", "auc_after": "reward", "judge_calls_to_bar": "judge calls"}.get(metric, "episodes")
        )
    handles = [Line2D([], [], color=palette[a], lw=8, alpha=0.75) for a in arms]
    fig.legend(handles, arms, title="arm", loc="outside right upper", fontsize=8, title_fontsize=8)
    return fig
