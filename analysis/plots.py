"""Seaborn figures of a run's realignment (Agg backend; every function returns a matplotlib
`Figure`, or None when the run has nothing to draw, and never touches pyplot's global state).

  realignment_figure   the paper's Figure 5: held-out style shares over time (one panel per arm)
                       above the rolling training reward per arm with 95% bands over seeds;
                       phases shaded in the target style's colour, switches dashed.
  target_share_figure  per arm: held-out share of the current target style, and held-out reward.
  speed_figure         realignment speed per arm and switch: bars = mean over seeds, whiskers =
                       bootstrap 95% interval, dots = seeds.
  judge_calls_figure   rolling training reward against cumulative judge calls.
  training_figure      trainer diagnostics from the updates table (loss, gradient norm, entropy,
                       KL, masked fraction, |advantage|), whichever columns are present.
  critic_figure        critic diagnostics where present: value explained variance, critic loss,
                       gradient norms by module family for policy and critic, expert load.

Colours: `arm_palette` gives each arm the same colour in every figure (known trainers have fixed
colours), `style_palette` each style likewise.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # a notebook's inline backend is left alone
    matplotlib.use("Agg")

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis import realign

# ----------------------------------------------------------------------------------------------
# colours

STYLE_ORDER = ["cute", "chuunibyou", "classical", "academic", "plain", "mixed"]
STYLE_COLORS = {
    "cute": "#e7298a",        # pink
    "chuunibyou": "#7570b3",  # violet
    "classical": "#a6761d",   # ochre
    "academic": "#1b9e77",    # teal
    "plain": "#666666",       # grey
    "mixed": "#bbbbbb",       # light grey
}
_ARM_BASE = sns.color_palette("tab10").as_hex()
ARM_COLORS = {"sao": _ARM_BASE[0], "running_mean": _ARM_BASE[1], "grpo": _ARM_BASE[2], "rloo": _ARM_BASE[3]}
FAMILY_COLORS = {"attention": "#4c72b0", "experts": "#dd8452", "router": "#55a868", "other": "#8c8c8c"}
FAMILY_ORDER = ["attention", "experts", "router", "other"]

RC = {"figure.dpi": 110, "savefig.dpi": 110, "axes.titleweight": "bold", "legend.frameon": False}


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


def _figure(nrows: int, ncols: int, width: float, height: float, **kw):
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9), matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


_DASHES = ["-", "--", ":", "-."]


def band_lineplot(ax, data: pd.DataFrame, x: str, y: str, hue: str, hue_order: Sequence | None = None,
                  palette: dict | None = None, style: str | None = None, unit: str = "seed", n_boot: int = 300,
                  marker: str | None = None, lw: float = 1.6, label: bool = True) -> None:
    """Mean of y over `unit` (seeds) at each x, per hue (and line style per `style`), with a 95%
    percentile-bootstrap band over units where there are several: the same statistic as
    seaborn's lineplot(errorbar=("ci", 95)), vectorised so that a report stays fast."""
    if data is None or data.empty:
        return
    data = data.dropna(subset=[y])
    hues = [h for h in (hue_order if hue_order is not None else sorted(data[hue].unique(), key=str))
            if (data[hue] == h).any()]
    styles = sorted(data[style].unique(), key=str) if style else [None]
    palette = palette or {h: c for h, c in zip(hues, sns.color_palette("tab10", len(hues)).as_hex())}
    rng = np.random.default_rng(0)
    for h in hues:
        for k, st in enumerate(styles):
            d = data[data[hue] == h]
            if st is not None:
                d = d[d[style] == st]
            if d.empty:
                continue
            wide = d.pivot_table(index=x, columns=unit, values=y, aggfunc="mean").sort_index()
            xs, m = wide.index.to_numpy(float), wide.to_numpy(float)
            mean = np.nanmean(m, axis=1)
            name = str(h) if st is None else f"{h} ({st})"
            ax.plot(xs, mean, color=palette.get(h, "#333333"), ls=_DASHES[k % len(_DASHES)], lw=lw, marker=marker,
                    markersize=3, label=name if label else None)
            if m.shape[1] > 1:
                idx = rng.integers(0, m.shape[1], size=(n_boot, m.shape[1]))
                with warnings.catch_warnings():  # an x where every resampled seed is missing
                    warnings.simplefilter("ignore", RuntimeWarning)
                    boots = np.nanmean(m[:, idx], axis=2)  # x by n_boot
                    lo, hi = np.nanquantile(boots, [0.025, 0.975], axis=1)
                ax.fill_between(xs, lo, hi, color=palette.get(h, "#333333"), alpha=0.2, lw=0)


def shade_phases(ax, switch_points: Sequence[int], budget: int, targets: Sequence[str | None],
                 label: bool = True) -> None:
    """Tint each phase with its target style's colour, dash the switches, and (label=True) name
    the target at the top of the panel."""
    bounds = realign.phase_bounds(switch_points, budget)
    pal = style_palette([t for t in targets if t])
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        style = targets[i] if i < len(targets) else None
        if style:
            ax.axvspan(a, b, color=pal[style], alpha=0.07, lw=0, zorder=0)
            if label:
                ax.text((a + b) / 2, 1.0, f"target: {style}", transform=ax.get_xaxis_transform(), ha="center",
                        va="bottom", fontsize=8, color=pal[style], fontweight="bold")
    for s in switch_points:
        ax.axvline(s, color="#333333", ls="--", lw=1, zorder=1)


def _legend_right(ax, title: str | None = None) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    if handles:
        ax.legend(handles, labels, title=title, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  title_fontsize=8)


# ----------------------------------------------------------------------------------------------
# figures over time


def realignment_figure(episodes: pd.DataFrame, evals: pd.DataFrame | None, switch_points: Sequence[int],
                       budget: int, window: int | None = None, title: str | None = None,
                       palette: dict[str, str] | None = None) -> Figure | None:
    """Held-out style shares (one panel per arm, when there are evaluations) over the rolling
    training reward per arm (mean over seeds, 95% bootstrap band)."""
    if episodes is None or episodes.empty:
        return None
    window = realign.auto_window(switch_points, budget, window)
    arms = sorted(episodes["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    shares = realign.share_curves(evals) if evals is not None else pd.DataFrame()
    share_arms = [a for a in arms if not shares.empty and (shares["arm"] == a).any()]
    targets = realign.phase_targets(episodes, evals, switch_points, budget)
    n = len(share_arms) + 1
    fig, axes = _figure(n, 1, 10, 2.6 * len(share_arms) + 3.2, sharex=True)
    axes = axes[:, 0]
    styles = ordered_styles(shares["style"].unique()) if not shares.empty else []
    spal = style_palette(styles)
    for ax, arm in zip(axes, share_arms):
        data = shares[shares["arm"] == arm]
        band_lineplot(ax, data, "t", "share", "style", styles, spal, marker="o")
        shade_phases(ax, switch_points, budget, targets, label=ax is axes[0])
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("held-out share")
        seeds = data["seed"].nunique()
        ax.set_title(f"Held-out style shares - {arm} ({seeds} seed{'s' if seeds != 1 else ''})", loc="left", pad=14)
        _legend_right(ax, "style")
    ax = axes[-1]
    curve = realign.reward_curve(episodes, window)
    if not curve.empty:
        seeds = curve["seed"].nunique()
        band_lineplot(ax, curve, "t", "rolling_reward", "arm", arms, palette, lw=1.8)
    shade_phases(ax, switch_points, budget, targets, label=not share_arms)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(0, budget)
    ax.set_ylabel(f"training reward\n(rolling mean, {window} episodes)")
    ax.set_xlabel("training episodes (drift clock t)")
    seeds = episodes["seed"].nunique()
    band = "mean over seeds, 95% bootstrap band" if seeds > 1 else "one seed"
    ax.set_title(f"Training reward per arm ({band})", loc="left", pad=14 if not share_arms else 4)
    _legend_right(ax, "arm")
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


def target_share_figure(evals: pd.DataFrame | None, switch_points: Sequence[int], budget: int,
                        palette: dict[str, str] | None = None, title: str | None = None) -> Figure | None:
    """Per arm: the held-out share of the style that is the target at each evaluation, and the
    held-out reward (mean over seeds with 95% band)."""
    curve = realign.target_share_curve(evals) if evals is not None else pd.DataFrame()
    if curve.empty:
        return None
    arms = sorted(curve["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    targets = realign.phase_targets(pd.DataFrame(), evals, switch_points, budget)
    fig, axes = _figure(2, 1, 10, 5.6, sharex=True)
    for ax, col, label in ((axes[0, 0], "target_share", "share of the current\ntarget style"),
                           (axes[1, 0], "eval_reward", "held-out reward")):
        data = curve.dropna(subset=[col])
        if not data.empty:
            band_lineplot(ax, data, "t", col, "arm", arms, palette, marker="o")
        shade_phases(ax, switch_points, budget, targets, label=ax is axes[0, 0])
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(label)
        _legend_right(ax, "arm")
    axes[0, 0].set_title("Held-out prompts: share of the current target style", loc="left", pad=14)
    axes[1, 0].set_title("Held-out prompts: reward (quality x style match)", loc="left")
    axes[1, 0].set_xlabel("training episodes (drift clock t)")
    axes[1, 0].set_xlim(0, budget)
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


def judge_calls_figure(episodes: pd.DataFrame, updates: pd.DataFrame | None, switch_points: Sequence[int],
                       budget: int, window: int | None = None, palette: dict[str, str] | None = None,
                       title: str | None = None) -> Figure | None:
    """Rolling training reward against the cumulative judge calls of each arm; a dotted line in
    the arm's colour where it reached each switch."""
    if episodes is None or episodes.empty:
        return None
    window = realign.auto_window(switch_points, budget, window)
    curve = realign.judge_call_curve(episodes, updates, window)
    if curve.empty:
        return None
    arms = sorted(curve["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    fig, axes = _figure(1, 1, 10, 3.8)
    ax = axes[0, 0]
    # a common grid of judge calls so that seeds can be banded
    step = max(1.0, float(curve["judge_calls"].max()) / 300)
    curve = curve.assign(judge_calls=(curve["judge_calls"] / step).round() * step)
    band_lineplot(ax, curve, "judge_calls", "rolling_reward", "arm", arms, palette, lw=1.8)
    for arm in arms:
        g = curve[curve["arm"] == arm]
        for s in switch_points:
            near = g.loc[(g["t"] - s).abs().groupby(g["seed"]).idxmin()] if not g.empty else g
            if not near.empty and (near["t"] - s).abs().min() <= window:
                ax.axvline(float(near["judge_calls"].mean()), color=palette[arm], ls=":", lw=1.2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("judge calls (cumulative, failed calls included)")
    ax.set_ylabel(f"training reward\n(rolling mean, {window} episodes)")
    ax.set_title("Training reward per judge call (dotted: target switches)", loc="left")
    _legend_right(ax, "arm")
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig


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


def _smooth(updates: pd.DataFrame, cols: list[str], span: int = 5) -> pd.DataFrame:
    parts = []
    for _, g in updates.sort_values("t").groupby(["arm", "seed"], sort=True):
        g = g.copy()
        g[cols] = g[cols].rolling(span, min_periods=1).mean()
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else updates


def _numeric_present(updates: pd.DataFrame, col: str) -> bool:
    return col in updates and pd.api.types.is_numeric_dtype(updates[col]) and updates[col].notna().any()


def _panel_grid(n: int, ncols: int = 3, w: float = 4.2, h: float = 2.9, title: str | None = None):
    ncols = min(ncols, n)
    nrows = int(np.ceil(n / ncols))
    fig, axes = _figure(nrows, ncols, w * ncols + 1.5, h * nrows + 0.6)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontweight="bold")
    return fig, flat[:n]


def training_figure(updates: pd.DataFrame | None, switch_points: Sequence[int], budget: int,
                    palette: dict[str, str] | None = None, title: str | None = None) -> Figure | None:
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
    fig, axes = _panel_grid(len(panels), title=title or "Trainer diagnostics (rolling mean of 5 updates)")
    for ax, (col, label) in zip(axes, panels):
        band_lineplot(ax, data, "t", col, "arm", arms, palette, lw=1.3, label=ax is axes[0])
        for s in switch_points:
            ax.axvline(s, color="#333333", ls="--", lw=0.9)
        ax.set_title(label, loc="left", fontsize=9)
        ax.set_xlabel("training episodes (t)")
        ax.set_ylabel("")
        ax.set_xlim(0, budget)
    handles, labels = axes[0].get_legend_handles_labels() if axes else ([], [])
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


def critic_figure(updates: pd.DataFrame | None, switch_points: Sequence[int], budget: int,
                  palette: dict[str, str] | None = None, title: str | None = None) -> Figure | None:
    """Critic diagnostics, drawn only for the columns present: value explained variance, critic
    loss, gradient norms by module family (policy_/critic_grad_norm_<family>; colour = family,
    line style = arm) and MoE expert load (*expert_load_cv, *expert_load_peak)."""
    if updates is None or updates.empty or "t" not in updates:
        return None
    arms = sorted(updates["arm"].unique(), key=str)
    palette = palette or arm_palette(arms)
    scalar = [(c, lab) for c, lab in [("value_explained_variance", "value explained variance"),
                                      ("critic_loss", "critic (value) loss")] if _numeric_present(updates, c)]
    families = [(p, _family_long(updates, p)) for p in ("policy_", "critic_")]
    families = [(p, d) for p, d in families if not d.empty]
    load_cols = [c for c in updates.columns if ("expert_load" in c or "load_balance" in c) and _numeric_present(updates, c)]
    n = len(scalar) + len(families) + (1 if load_cols else 0)
    if n == 0:
        return None
    fig, axes = _panel_grid(n, ncols=2, w=5.2, h=3.1,
                            title=title or "Critic and module diagnostics (rolling mean of 5 updates)")
    it = iter(axes)
    smooth = _smooth(updates, [c for c, _ in scalar] + load_cols)
    for col, label in scalar:
        ax = next(it)
        band_lineplot(ax, smooth, "t", col, "arm", arms, palette, lw=1.3)
        if col == "value_explained_variance":
            ax.axhline(0, color="#999999", lw=0.8)
            ax.set_ylim(max(-1.05, float(smooth[col].min()) - 0.05), 1.05)
        ax.set_title(label, loc="left", fontsize=9)
        _legend_right(ax, "arm")
    for prefix, long in families:
        ax = next(it)
        fams = [f for f in FAMILY_ORDER if f in set(long["family"])]
        band_lineplot(ax, long, "t", "norm", "family", fams, FAMILY_COLORS,
                      style="arm" if long["arm"].nunique() > 1 else None, lw=1.3)
        if (long["norm"] > 0).all():
            ax.set_yscale("log")
        ax.set_title(f"{prefix.rstrip('_')} gradient norm by module family", loc="left", fontsize=9)
        _legend_right(ax)
    if load_cols:
        ax = next(it)
        long = smooth[["arm", "seed", "t", *load_cols]].melt(id_vars=["arm", "seed", "t"], value_vars=load_cols,
                                                             var_name="measure", value_name="load")
        band_lineplot(ax, long, "t", "load", "measure", style="arm" if len(arms) > 1 else None, lw=1.3)
        ax.set_title("expert load (cv: 0 = balanced; peak: 1 = balanced)", loc="left", fontsize=9)
        _legend_right(ax)
    for ax in axes:
        for s in switch_points:
            ax.axvline(s, color="#333333", ls="--", lw=0.9)
        ax.set_xlabel("training episodes (t)")
        ax.set_ylabel("")
        ax.set_xlim(0, budget)
    return fig


# ----------------------------------------------------------------------------------------------
# realignment speed


SPEED_PANELS = [
    ("episodes_to_recover", "episodes until the reward recovers"),
    ("judge_calls_to_recover", "judge calls until the reward recovers"),
    ("dip", "dip: lowest rolling reward after the switch"),
    ("horizon_reward", "mean reward over the horizon after the switch"),
    ("old_half_life", "old style's held-out share: half-life (episodes)"),
    ("crossover", "episodes until the new style's share passes the old"),
]


def switch_labels(per_seed: pd.DataFrame) -> dict:
    """'run | 1: cute -> chuunibyou (t=2400)' per (run, switch) key."""
    out = {}
    cols = [c for c in ("run", "switch", "t", "from_style", "to_style") if c in per_seed]
    for _, r in per_seed[cols].drop_duplicates().iterrows():
        key = (r.get("run"), r["switch"]) if "run" in per_seed else (None, r["switch"])
        label = f"switch {r['switch']}: {r['from_style']} -> {r['to_style']}\n(t = {r['t']})"
        if "run" in per_seed and per_seed["run"].nunique() > 1:
            label = f"{r['run']}\n" + label
        out[key] = label
    return out


def speed_figure(per_seed: pd.DataFrame, summary: pd.DataFrame, palette: dict[str, str] | None = None,
                 title: str | None = None) -> Figure | None:
    """Bars per switch and arm (mean over seeds) with bootstrap 95% whiskers and a dot per seed.
    Seeds that never recovered have no value; the panel says how many of the seeds recovered."""
    if per_seed is None or per_seed.empty:
        return None
    has_run = "run" in per_seed
    keys = list(switch_labels(per_seed))
    labels = switch_labels(per_seed)
    arms = list(dict.fromkeys(sorted(per_seed["arm"].unique(), key=str)))
    palette = palette or arm_palette(arms)
    panels = [(m, lab) for m, lab in SPEED_PANELS if m in per_seed and per_seed[m].notna().any()
              or m in ("episodes_to_recover",)]
    fig, axes = _panel_grid(len(panels), ncols=2, w=5.6, h=3.2,
                            title=title or "Realignment speed per switch (bars: mean over seeds; whiskers: "
                                           "bootstrap 95% CI; dots: seeds)")
    width = 0.8 / max(1, len(arms))
    for ax, (metric, label) in zip(axes, panels):
        top = 0.0
        for j, arm in enumerate(arms):
            for i, key in enumerate(keys):
                run, sw = key
                sel = (per_seed["arm"] == arm) & (per_seed["switch"] == sw)
                ssel = (summary["arm"] == arm) & (summary["switch"] == sw)
                if has_run:
                    sel &= per_seed["run"] == run
                    ssel &= summary["run"] == run
                seeds = per_seed[sel]
                if seeds.empty:
                    continue
                x = i - 0.4 + width * (j + 0.5)
                row = summary[ssel].iloc[0] if ssel.any() else None
                vals = seeds[metric].to_numpy(float)
                if row is not None and np.isfinite(row[metric]):
                    ax.bar(x, row[metric], width=width * 0.9, color=palette[arm], alpha=0.75,
                           label=arm if i == 0 else None)
                    lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
                    if np.isfinite(lo) and np.isfinite(hi):
                        ax.errorbar(x, row[metric], yerr=[[row[metric] - lo], [hi - row[metric]]], color="#222222",
                                    capsize=3, lw=1)
                        top = max(top, hi)
                    top = max(top, row[metric])
                else:
                    ax.bar(x, 0, width=width * 0.9, color=palette[arm], label=arm if i == 0 else None)
                finite = vals[np.isfinite(vals)]
                if finite.size:
                    jitter = np.linspace(-width * 0.2, width * 0.2, finite.size) if finite.size > 1 else [0.0]
                    ax.scatter(x + np.asarray(jitter), finite, s=14, color="#222222", zorder=3, lw=0)
                    top = max(top, float(finite.max()))
                if metric in ("episodes_to_recover", "judge_calls_to_recover"):
                    data_seeds = int(seeds["status"].isin(["recovered", "not recovered"]).sum())
                    rec = int(seeds["recovered"].astype(bool).sum())
                    text = f"{rec}/{data_seeds}\nrecovered" if data_seeds else "n/a"
                    if data_seeds and rec < data_seeds:
                        text += f"\nwithin {int(seeds['episodes_after'].max())}"
                    ax.annotate(text, (x, 0), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                                fontsize=7, color="#b00000" if rec < data_seeds or not data_seeds else "#222222",
                                rotation=90 if len(arms) > 2 else 0)
            if metric in ("dip", "horizon_reward") and "plateau" in summary:
                for i, key in enumerate(keys):
                    ssel = (summary["switch"] == key[1]) & (summary["arm"] == arm)
                    if has_run:
                        ssel &= summary["run"] == key[0]
                    if ssel.any() and np.isfinite(summary[ssel]["plateau"].iloc[0]):
                        x = i - 0.4 + width * (j + 0.5)
                        ax.hlines(summary[ssel]["plateau"].iloc[0], x - width * 0.45, x + width * 0.45,
                                  color=palette[arm], lw=2.2, ls=(0, (2, 1)))
        if metric in ("dip", "horizon_reward"):
            mark = Line2D([], [], color="#555555", lw=2.2, ls=(0, (2, 1)))
            ax.legend([mark], ["pre-switch plateau (dashed, arm colour)"], loc="upper right", fontsize=7)
        ax.grid(False, axis="x")
        ax.set_xticks(range(len(keys)), [labels[k] for k in keys], fontsize=7.5)
        ax.set_title(label, loc="left", fontsize=9)
        if metric in ("dip", "horizon_reward"):
            ax.set_ylim(0, 1.05)
        else:
            ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_ylabel({"dip": "reward", "horizon_reward": "reward", "judge_calls_to_recover": "judge calls"}
                      .get(metric, "episodes"))
    handles = [Line2D([], [], color=palette[a], lw=8, alpha=0.75) for a in arms]
    fig.legend(handles, arms, title="arm", loc="outside right upper", fontsize=8, title_fontsize=8)
    return fig
