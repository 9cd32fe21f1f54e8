"""The reference a realignment is measured against, independent of the arms.

For each phase of the schedule, the reward of the seed's starting (SFT) policy when its prompt
offers only the target style: a policy *told* the target, with no RL at all. Where the schedule
changes the judge, each phase's reference is judged by that phase's judge: a judge change is a
switch like any other, with its own bar. Every arm of a seed
starts from the same policy, so every arm writes the same rows for it; the analysis grades all
arms of a seed against one bar (`analysis/metrics/realign.py`, `episodes_to_bar`) and measures dynamic
regret against it (`analysis/metrics/nonstationary.py`).

Sampled under its own seed inside `torch.random.fork_rng`, so the training rows never depend on
whether or how often the reference was evaluated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from testbed.protocols import Engine, Env
from testbed.runtimes.collect import heldout_rows
from testbed.runtimes.learn import stop_if_refused
from testbed.world import PromptSpec

REFERENCE_SEED_OFFSET = 7919  # the reference's sampling seed is the run seed plus this (a stream of its own)


def phase_clocks(switch_points: list[int], budget: int) -> list[tuple[int, int]]:
    """(start, end) of each phase: [0, T1), [T1, T2), ..., [Tn, budget)."""
    bounds = [0, *switch_points, budget]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def settled_judges(schedule: Any, switch_points: list[int], budget: int) -> list[str | None]:
    """The judge each phase's reference is judged by, for a schedule that changes the judge
    (`judge_at`; else None per phase): the one in force at the phase's first clock outside every
    transition window (`windows()`), so that after a blend of two judges the new phase's bar is the
    new judge's, not a draw between the two."""
    pick = getattr(schedule, "judge_at", None)
    if not callable(pick):
        return [None] * len(phase_clocks(switch_points, budget))
    windows = list(getattr(schedule, "windows", list)())
    out = []
    for start, end in phase_clocks(switch_points, budget):
        t = max([start, *(hi for lo, hi in windows if lo <= start < hi)])
        out.append(pick(min(t, end - 1)))
    return out


def reference_rows(
    env: Env,
    engine: Engine,
    specs: list[PromptSpec],
    switch_points: list[int],
    budget: int,
    samples: int,
    seed: int,
    judges: list[str | None] | None = None,
) -> list[dict]:
    """One row per phase: the starting policy, told the target of the phase's first clock, on
    `samples` episodes per held-out prompt, judged by the phase's judge (`judges`, from
    `settled_judges`; None: the env's choice at that clock). Failed verdicts are left out (`n`
    counts the rest); a refused one (`testbed.types.judge_refused`) raises JudgeRefused."""
    rows = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + REFERENCE_SEED_OFFSET)
        for phase, (start, end) in enumerate(phase_clocks(switch_points, budget)):
            starts = [s for s in env.told_target_starts(specs, start) for _ in range(samples)]
            judge = judges[phase] if judges else None
            if judge is not None:  # the phase's own judge, not a blend's draw at its first clock
                starts = [dataclasses.replace(s, judge=judge) for s in starts]
            trajs = env.rollout(engine, starts)
            target = starts[0].target.style
            # the held-out evaluation's own summary (failed verdicts left out), read at the target's row
            verdicts = env.evaluate_batch(starts, [t.response_text for t in trajs])
            stop_if_refused(verdicts)
            per_style = heldout_rows(verdicts, start, target)
            # a style outside the world's list that no verdict named has no row: its share is 0
            summary = next((r for r in per_style if r["style"] == target), {**per_style[0], "share": 0.0})
            rows.append(
                {
                    "phase": phase,
                    "start": start,
                    "end": end,
                    "target_style": target,
                    "candidates": ", ".join(starts[0].target.candidates),
                    "samples": len(starts),
                    "n": summary["n"],
                    "reward": summary["eval_reward"],
                    "quality": summary["eval_quality"],
                    "target_share": summary["share"],
                    **({"judge": judge} if judge is not None else {}),
                }
            )
    return rows


def timed_reference_rows(
    env: Env, engine: Engine, specs: list[PromptSpec], schedule: Any, samples: int, seed: int
) -> list[dict]:
    """`reference_rows` for a schedule in simulated seconds (`SimTimeSchedule`): one row per phase,
    every target pinned to the one in force at the phase's first second. Its episodes are not
    known before the run, so `start` and `end` are NaN and `start_s` gives the phase's start."""
    rows = []
    for phase, second in enumerate(schedule.phase_starts_s()):
        with schedule.pinned(second):
            row = reference_rows(env, engine, specs, [], 1, samples, seed + phase)[0]
        rows.append({**row, "phase": phase, "start": float("nan"), "end": float("nan"), "start_s": second})
    return rows
