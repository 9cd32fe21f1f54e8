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
# # Comparing runs
#
# Several run directories side by side (for instance the same scenario with different trainers, or
# before and after a change). Arms are labelled `run:arm`. If the runs share their schedule (switch
# points, budget, targets) their curves share the figures; otherwise each run gets its own.
#
# **Parameters**: `TESTBED_RUN_DIRS` (paths separated by `os.pathsep`, ':' on Linux), or edit the
# next cell. Figures go to `TESTBED_NOTEBOOK_OUT` (default: `notebook_figures/compare_runs/` in the
# folder `python -m analysis.report` would use for these runs, beside the report's own `figures/`).

# %%
import functools
import os
import sys
from pathlib import Path

import pandas as pd
from IPython.display import Image, Markdown, display

ROOT = Path.cwd().parent if Path.cwd().name == "analysis" else Path.cwd()
sys.path.insert(0, str(ROOT))
from analysis import report  # noqa: E402
from analysis.notebooks.helpers import figure_dir, newest_runs, save_and_show  # noqa: E402
from analysis.tables import summary as tables  # noqa: E402
from analysis.tables.markdown import md_table  # noqa: E402

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 40)

RUN_DIRS = [
    p for p in (os.environ.get("TESTBED_RUN_DIRS") or os.environ.get("TESTBED_RUN_DIR") or "").split(os.pathsep) if p
] or newest_runs(ROOT, 2)
FIG_DIR = figure_dir(report.default_out_dir([Path(p) for p in RUN_DIRS]), "compare_runs")
show = functools.partial(save_and_show, fig_dir=FIG_DIR)  # show(fig, name): save as FIG_DIR/name.png and show
WINDOW, FRACTION, HORIZON = None, 0.9, 512
print("runs:", *RUN_DIRS, sep="\n  ")
print("figures:", FIG_DIR)

# %%
runs = [report.load_run(p) for p in RUN_DIRS]
a = report.analyse(runs, window=WINDOW, fraction=FRACTION, horizon=HORIZON)
for r in runs:
    print(
        f"{r.name}: scenario {r.manifest.get('scenario')}, budget {r.budget}, seeds {r.seeds}, "
        f"switches {r.switch_points}, window {a.windows[r.name]}; notes: {'; '.join(r.notes) or 'none'}"
    )
a.arms

# %% [markdown]
# ## Side by side
#
# One row per run, arm and switch: the common bar, seeds that reached it, episodes (restricted mean,
# censored seeds at the phase's length, and Kaplan-Meier median) and judge calls to it, mean reward
# over the horizon, plateau and dip, the own-plateau metric, the old style's held-out half-life and
# the crossover (definitions in `realignment.ipynb` and `summary.md`); brackets are 95% bootstrap
# intervals over seeds. Arms of different runs share no seeds, so paired.csv compares them unpaired.

# %%
display(
    Markdown(
        md_table(tables.SWITCH_HEADER, tables.switch_rows(a.switches)) if not a.switches.empty else "_no switches_"
    )
)

# %%
# the same numbers as a wide table, one column per run:arm
metrics = [
    "reached_bar",
    "episodes_to_bar",
    "km_median",
    "judge_calls_to_bar",
    "auc_after",
    "dip",
    "recovered_own_plateau",
    "episodes_to_own_plateau",
    "old_half_life",
    "crossover",
]
a.switches.set_index(["switch", "arm"])[metrics].unstack("arm").T if not a.switches.empty else None

# %% [markdown]
# ## Figures
#
# `report.make_figures` draws the same figures as `python -m analysis.report`: the Figure-5 view,
# held-out target share, realignment speed per switch, reward per judge call, trainer and (where
# present) critic diagnostics. Each arm keeps its colour across all of them.

# %%
for path in report.make_figures(a, FIG_DIR):
    display(Markdown(f"**{path.stem}**"))
    display(Image(filename=str(path)))
