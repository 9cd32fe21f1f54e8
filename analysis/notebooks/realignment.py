# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Realignment of one run
#
# How quickly each arm (trainer) realigns after the hidden target style switches. The notebook reads
# one run directory (written by `python -m testbed.run SCENARIO`) through `testbed.store.read_table`
# only, computes the metrics of `analysis/metrics/realign.py` and draws the figures of `analysis/figures/plots.py`.
#
# **Parameters**: set `TESTBED_RUN_DIR` before starting Jupyter, or edit the next cell. Figures are
# saved to `TESTBED_NOTEBOOK_OUT` (default: the run's `notebook_figures/realignment/`; the report's own
# `figures/` are never written over).

# %%
import functools
import os
import sys
from pathlib import Path

import pandas as pd
from IPython.display import Markdown, display

ROOT = Path.cwd().parent if Path.cwd().name == "analysis" else Path.cwd()
sys.path.insert(0, str(ROOT))
from analysis import report  # noqa: E402
from analysis.figures import plots  # noqa: E402
from analysis.notebooks.helpers import figure_dir, newest_runs, save_and_show  # noqa: E402
from analysis.tables import summary as tables  # noqa: E402
from analysis.tables import verdicts  # noqa: E402
from analysis.tables.markdown import md_table  # noqa: E402

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 40)

RUN_DIR = os.environ.get("TESTBED_RUN_DIR") or (newest_runs(ROOT, 1) or [""])[0]
FIG_DIR = figure_dir(RUN_DIR, "realignment")
show = functools.partial(save_and_show, fig_dir=FIG_DIR)  # show(fig, name): save as FIG_DIR/name.png and show
WINDOW = None  # rolling-reward window in episodes; None: 128, at most a quarter of the shortest phase
FRACTION = 0.9  # the bar = FRACTION x the reference reward (or the best pre-switch plateau of the seed's arms)
HORIZON = 512  # episodes after a switch for the mean reward (None: the whole phase)
print("run:", RUN_DIR)
print("figures:", FIG_DIR)

# %%
run = report.load_run(RUN_DIR)
a = report.analyse([run], window=WINDOW, fraction=FRACTION, horizon=HORIZON)
window = a.windows[run.name]
palette = plots.arm_palette(list(a.arms["arm"]))
print(
    f"scenario {run.manifest.get('scenario')}, budget {run.budget} episodes, seeds {run.seeds}, "
    f"switches at {run.switch_points}, rolling window {window}"
)
print("notes:", "; ".join(run.notes) or "none")
a.arms

# %% [markdown]
# ## The run at a glance (the paper's Figure 5)
#
# Top (one panel per arm): the share of each style among the policy's answers to a fixed set of
# **held-out prompts**, evaluated every few hundred episodes. Bottom: the **training reward**, a
# rolling mean over the last `window` judged episodes, per arm; with several seeds the line is the
# mean over seeds and the band a 95% bootstrap interval. The background is tinted with the current
# target style's colour and the dashed lines are the switches. What to look for: after each switch the
# old dominant style should be suppressed and the new target should take over; the reward dips and
# climbs back.

# %%
show(
    plots.realignment_figure(
        run.episodes, run.evals, run.switch_points, run.budget, window, title=run.name, palette=palette
    ),
    "realignment",
)

# %% [markdown]
# ## Realignment metrics, per seed
#
# For each switch at clock T from the old target O to the new target N:
#
# * **plateau**: the mean reward of the `window` judged episodes before T (what there is to recover).
# * **dip**: the lowest rolling reward over windows that lie wholly after T (and before the next
#   switch); `dip_at` is where that window ends, in episodes after T.
# * **bar** (`bar_source`): the level every arm of a seed is graded against: `FRACTION` x the reward of
#   the seed's reference policy (its SFT policy prompted with N only, from the run's `reference`
#   table), or, for runs without one, `FRACTION` x the best pre-switch plateau over the seed's arms.
# * **episodes_to_bar**: episodes until the rolling reward, computed from post-switch episodes only,
#   first reaches the bar (at least one `window`, since the first full window ends there). A seed
#   that never does before the next switch is **censored** at the phase's length (`censored`,
#   `reached_bar`): it keeps that value rather than being dropped.
# * **judge_calls_to_bar**: judge calls spent from T to the bar (or to the phase end if censored),
#   failed calls included (from the updates table's cumulative `judge_calls`): the cost of
#   realigning, which differs from the episode count for arms that sample several answers per prompt (GRPO).
# * **auc_after**: the mean reward over the `HORIZON` episodes after T: the area under the reward
#   curve, so it rewards both a shallow dip and a fast recovery, with no threshold.
# * **episodes_to_own_plateau** (secondary; `status`, `recovered_own_plateau`): the same against
#   `FRACTION` x the arm's own pre-switch plateau, censored likewise. An arm with a lower plateau has
#   an easier bar there, which is why the common bar leads.
# * **old_half_life**: episodes until O's held-out share falls to half its value at T (linear between
#   evaluations): how fast the old habit is unlearned.
# * **crossover**: episodes until N's held-out share passes O's: when the new style takes over.
# * **new_share_end**: N's held-out share at the last evaluation before the next switch.

# %%
a.per_seed

# %% [markdown]
# ## Per arm: mean over seeds and 95% bootstrap intervals
#
# `aggregate` averages each metric over the seeds that have a value and resamples seeds with
# replacement for a percentile interval (no interval with a single seed). Episodes to the bar is a
# restricted mean (censored seeds at the phase's length), shown with reached k/n and the
# Kaplan-Meier median. This is the table `summary.md` shows.

# %%
display(
    Markdown(
        md_table(tables.SWITCH_HEADER, tables.switch_rows(a.switches)) if not a.switches.empty else "_no switches_"
    )
)

# %% [markdown]
# ## Arms compared seed by seed, between switches, pooled, and the Goodhart gap
#
# The arms of a seed share its SFT policy, so they are compared by per-seed differences
# (`analysis/stats/paired.py`): the paired t interval decides, with the run's power to resolve a difference.
# Per segment between switches: the reward area and the dynamic regret against the reference policy
# (or the best arm's plateau for older runs); then every metric pooled over switches and segments
# after a switch with rliable's mean and IQM intervals and the probability that one arm beats
# another. With a gold judge
# (`judge.gold`), the gap between the training judge's reward and the gold judge's. The same
# sections as `summary.md`.

# %%
display(Markdown("\n".join(verdicts.lead_lines(a) + verdicts.paired_markdown(a)) or "_one arm: nothing to compare_"))
display(Markdown("\n".join(tables.nonstationary_markdown(a)) or "_no segment metrics for this run_"))
if not a.goodhart.empty:
    display(Markdown(md_table(tables.GOODHART_HEADER, tables.goodhart_rows(a.goodhart))))

# %% [markdown]
# ## Realignment speed
#
# Bars: the mean over seeds; whiskers: the bootstrap interval; dots: single seeds. The time-to panels
# say how many seeds reached the bar or their own plateau (red when not all did: the others count at
# the phase's length); in the dip and auc panels the dashed mark
# is the pre-switch plateau, so the distance from it to the bar is what the switch cost.

# %%
show(
    plots.speed_figure(
        a.per_seed.drop(columns="run", errors="ignore"),
        a.switches.drop(columns="run", errors="ignore"),
        palette=palette,
    ),
    "realignment_speed",
)

# %% [markdown]
# ## Held-out target share and held-out reward
#
# The share of the *current* target style on the held-out prompts and the held-out reward (quality x
# style match), per arm: the same realignment seen without the noise of training samples.

# %%
show(
    plots.target_share_figure(run.evals, run.switch_points, run.budget, palette=palette, title=run.name), "target_share"
)

# %% [markdown]
# ## Reward per judge call
#
# The training reward against the cumulative number of judge calls: with an expensive judge, the
# budget that matters. A trainer's warm-up calls (SAO's value pretraining) count too, so its curve
# starts where its first judged sample was spent. Dotted lines: where each arm reached a switch.

# %%
show(
    plots.judge_calls_figure(
        run.episodes, run.updates, run.switch_points, run.budget, window, palette=palette, title=run.name
    ),
    "reward_vs_judge_calls",
)

# %% [markdown]
# ## Trainer and critic diagnostics
#
# From the updates table, smoothed over 5 updates: policy loss, gradient norm, entropy, the
# approximate KL to the rollout policy, the share of tokens masked by DIS and the mean |advantage|.
# Trainers with a critic (SAO) also log the value explained variance (1 = the critic predicts the
# returns, 0 = no better than their mean), the critic loss, gradient norms by module family
# (attention / experts / router / other) for the policy and the critic, and the experts' load; that
# figure is drawn only when those columns are present.

# %%
show(plots.training_figure(run.updates, run.switch_points, run.budget, palette=palette), "training_diagnostics")
show(plots.critic_figure(run.updates, run.switch_points, run.budget, palette=palette), "critic_diagnostics")
