"""Step and gradual drift between contiguous phases."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from testbed.envs.schedules.base import Phase, PhasesConfig, check_candidates, check_clock, episodes
from testbed.registry import configured
from testbed.types import Target


class PiecewiseConfig(PhasesConfig):
    """`schedule: {type: piecewise, args: {phases: [{style, start, end, candidates}, ...]}}` (fractions)."""


@configured(PiecewiseConfig)
def piecewise(*, budget: int, archetypes: Sequence[str], **args: Any) -> PiecewiseSchedule:
    """The registered `piecewise`: its args (positions in fractions of the budget) -> clocks."""
    config = PiecewiseConfig.model_validate(args, context={"budget": budget})
    return PiecewiseSchedule(config.phases_in_episodes(budget, archetypes))


class PiecewiseSchedule:
    """Step switches between contiguous phases. Beyond the last phase's end the last target holds.

    Phases must be sorted and contiguous: the first starts at 0, each starts where the previous
    one ended, each has ``start < end``, and each phase's style is one of its candidates.
    Violations raise ``ValueError`` naming the phase index and the offending values.
    Phases may be given as :class:`Phase` objects or as dicts with the same fields (from YAML).
    """

    def __init__(self, phases: Sequence[Phase]) -> None:
        phases = [p if isinstance(p, Phase) else Phase(**p) for p in phases]
        if not phases:
            raise ValueError("PiecewiseSchedule needs at least one phase, got none")
        for i, p in enumerate(phases):
            where = f"phase {i} ({p.style!r}, start={p.start}, end={p.end})"
            check_candidates(p.candidates, where)
            if p.start >= p.end:
                raise ValueError(f"{where} is empty: start must be < end")
            if p.style not in p.candidates:
                raise ValueError(f"{where}: style {p.style!r} is not in its candidates {p.candidates}")
            if i == 0:
                if p.start != 0:
                    raise ValueError(f"{where}: the first phase must start at 0, got start={p.start}")
            else:
                prev_end = phases[i - 1].end
                if p.start > prev_end:
                    raise ValueError(
                        f"{where}: gap after phase {i - 1}: it ends at {prev_end} but phase {i} starts "
                        f"at {p.start} (phases must be contiguous: start == previous end)"
                    )
                if p.start < prev_end:
                    raise ValueError(
                        f"{where}: overlaps phase {i - 1}, which ends at {prev_end} > start {p.start} "
                        f"(phases must be sorted and contiguous: start == previous end)"
                    )
        self._phases: tuple[Phase, ...] = tuple(phases)
        self._starts = [p.start for p in phases]

    @property
    def phase_list(self) -> tuple[Phase, ...]:
        return self._phases

    def phase_index(self, t: int) -> int:
        """Index of the phase in force at clock ``t`` (the last one beyond its end)."""
        t = check_clock(t)
        return bisect.bisect_right(self._starts, t) - 1

    def target(self, t: int) -> Target:
        p = self._phases[self.phase_index(t)]
        return Target(style=p.style, candidates=p.candidates)

    def switch_points(self) -> list[int]:
        """Phase starts where the style changes (a change of candidates alone is not a switch)."""
        return [cur.start for prev, cur in zip(self._phases, self._phases[1:]) if cur.style != prev.style]

    def phases(self) -> list[tuple[int, int, str]]:
        return [(p.start, p.end, p.style) for p in self._phases]

    def __repr__(self) -> str:
        return f"PiecewiseSchedule({self.phases()})"


def _unit_hash(seed: int, t: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, t), stable across processes."""
    digest = hashlib.blake2b(f"{seed}:{t}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class GradualConfig(PhasesConfig):
    """`schedule: {type: gradual, args: {phases: [...], window: 0.1, seed: 0}}` (fractions of the budget)."""

    window: float = Field(0.1, gt=0.0, lt=1.0, description="transition width, fraction of budget")
    seed: int = 0


@configured(GradualConfig)
def gradual(*, budget: int, archetypes: Sequence[str], **args: Any) -> GradualSchedule:
    """The registered `gradual`: its args (positions in fractions of the budget) -> clocks."""
    config = GradualConfig.model_validate(args, context={"budget": budget})
    return GradualSchedule(
        config.phases_in_episodes(budget, archetypes), window=max(1, episodes(config.window, budget)), seed=config.seed
    )


class GradualSchedule:
    """Gradual drift: around each phase boundary ``b`` the target is a linear mix over the window
    ``[b - window//2, b - window//2 + window)``.

    Inside the window the probability that ``target(t)`` is the new style rises linearly from 0 to
    1 (``p = (t - lo + 0.5) / window``); which style is drawn at ``t`` is decided by a seeded hash
    of ``(seed, t)``, so ``target(t)`` is a pure function. During the window the candidates are
    the union of both phases' candidates (old phase's order first). Outside the windows it is the
    piecewise schedule. Each window must fit inside its two phases, and windows may not overlap.
    ``window=0`` is a plain step switch.
    """

    def __init__(self, phases: Sequence[Phase], window: int, seed: int = 0) -> None:
        self._piecewise = PiecewiseSchedule(phases)
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"window must be an int >= 0, got {window!r}")
        self.window = window
        self.seed = int(seed)
        ph = self._piecewise.phase_list
        self._windows: list[tuple[int, int, Phase, Phase]] = []  # (lo, hi, old, new)
        for k in range(1, len(ph)):
            old, new = ph[k - 1], ph[k]
            lo = new.start - window // 2
            hi = lo + window
            if lo < old.start:
                raise ValueError(
                    f"window {window} around the boundary at {new.start} (phase {k - 1} -> {k}) starts at "
                    f"{lo}, before phase {k - 1} starts ({old.start}); use a smaller window or longer phases"
                )
            if hi > new.end and k < len(ph) - 1:
                raise ValueError(
                    f"window {window} around the boundary at {new.start} (phase {k - 1} -> {k}) ends at "
                    f"{hi}, after phase {k} ends ({new.end}); use a smaller window or longer phases"
                )
            if self._windows and lo < self._windows[-1][1]:
                raise ValueError(
                    f"windows overlap: the window around {new.start} starts at {lo} before the previous "
                    f"window ends at {self._windows[-1][1]}; use a smaller window or longer phases"
                )
            self._windows.append((lo, hi, old, new))
        self._window_los = [w[0] for w in self._windows]

    def _window_at(self, t: int) -> tuple[int, int, Phase, Phase] | None:
        i = bisect.bisect_right(self._window_los, t) - 1
        if i >= 0 and t < self._windows[i][1]:
            return self._windows[i]
        return None

    def new_style_probability(self, t: int) -> float:
        """Probability that ``target(t)`` is the newer style of the window containing ``t``
        (0.0 outside windows, where the piecewise target applies)."""
        t = check_clock(t)
        w = self._window_at(t)
        if w is None:
            return 0.0
        lo, hi, _, _ = w
        return (t - lo + 0.5) / (hi - lo)

    def target(self, t: int) -> Target:
        t = check_clock(t)
        w = self._window_at(t)
        if w is None:
            return self._piecewise.target(t)
        lo, hi, old, new = w
        p_new = (t - lo + 0.5) / (hi - lo)
        style = new.style if _unit_hash(self.seed, t) < p_new else old.style
        candidates = tuple(dict.fromkeys(old.candidates + new.candidates))
        return Target(style=style, candidates=candidates)

    def switch_points(self) -> list[int]:
        """The middle of each transition window (= the nominal phase boundary) where the style changes."""
        return self._piecewise.switch_points()

    def windows(self) -> list[tuple[int, int]]:
        """The transition windows ``[lo, hi)``."""
        return [(lo, hi) for lo, hi, _, _ in self._windows]

    def phases(self) -> list[tuple[int, int, str]]:
        """The nominal phases (boundaries at the middle of each window)."""
        return self._piecewise.phases()

    def __repr__(self) -> str:
        return f"GradualSchedule({self.phases()}, window={self.window}, seed={self.seed})"
