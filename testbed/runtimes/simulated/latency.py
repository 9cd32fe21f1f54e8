"""How long things take in the simulated cluster: pure functions of the settings and of random
draws made when an episode starts (so an episode's earliest possible completion is known before
its response is generated, which lets the simulation batch generation; see cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.scenario.simulation import LatencyConfig, LearnerTimeConfig


@dataclass(frozen=True)
class Draws:
    """One episode's random latency factors, drawn at its start."""

    generation: float  # multiplies the generation time (stragglers included)
    judge_s: float  # the judge's latency, seconds


def draw(cfg: LatencyConfig, rng: np.random.Generator) -> Draws:
    """The random part of one episode's latency. Always three draws, whatever the settings, so a
    setting that changes one factor never shifts the stream of another episode's."""
    shape, straggle, judge = rng.standard_normal(), rng.random(), rng.standard_normal()
    # exponential: Exp(1) from the same normal draw, through its CDF
    exponential = cfg.distribution == "exponential"
    factor = float(-np.log1p(-_uniform(shape))) if exponential else float(np.exp(cfg.spread * shape))
    if straggle < cfg.straggler_share:
        factor *= cfg.straggler_factor
    return Draws(float(factor), float(cfg.judge_s * np.exp(cfg.judge_spread * judge)))


def _uniform(z: float) -> float:
    """The standard normal's CDF at z: a uniform variate from a normal one."""
    from math import erf, sqrt

    return min(max(0.5 * (1.0 + erf(z / sqrt(2.0))), 0.0), 1.0 - 1e-16)


def episode_seconds(cfg: LatencyConfig, draws: Draws, tokens: int, turns: int) -> float:
    """Generation (per turn and per response token, times the random factor) plus the judge."""
    return (cfg.per_turn_s * turns + cfg.per_token_s * tokens) * draws.generation + draws.judge_s


def earliest_seconds(cfg: LatencyConfig, draws: Draws) -> float:
    """A lower bound of `episode_seconds` before the response exists: one turn of one token."""
    return episode_seconds(cfg, draws, tokens=1, turns=1)


def update_seconds(cfg: LearnerTimeConfig, batch_tokens: int, factor: float = 1.0) -> float:
    """One update (times its random factor) and the weight sync after it: the learner is busy for all of it."""
    return (cfg.fixed_s + cfg.per_token_s * batch_tokens) * factor + cfg.sync_s


def update_factor(cfg: LearnerTimeConfig, rng: np.random.Generator) -> float:
    """An update's random factor: log-normal with median 1 and sigma `spread`; 1 (no draw) without one."""
    return float(np.exp(cfg.spread * rng.standard_normal())) if cfg.spread > 0 else 1.0
