"""Drift schedules: which style the hidden reward wants at each point of a run.

Every schedule works in clock units: ``t`` = the number of judged episodes so far (an int >= 0,
owned and advanced by the env). Schedules are pure and deterministic: ``target(t)`` depends only
on ``t`` and the schedule's own arguments (its seed included), never on call order, so a resumed
run or an analysis script sees exactly the targets the training run saw.

Each schedule implements the :class:`testbed.protocols.DriftSchedule` protocol:

- ``target(t) -> Target(style, candidates)``: the wanted style and the candidate styles the
  prompt lists at clock ``t``;
- ``switch_points() -> list[int]``: the clocks at which the target style changes (for gradual
  drift, the middle of each transition window);

and, for analysis, ``phases() -> list[(start, end, style)]`` (end exclusive).

Schedules shipped here: :class:`PiecewiseSchedule` (step switches), :class:`GradualSchedule`
(a linear mix across each boundary), :class:`PeriodicSchedule` (a fixed cycle) and
:class:`RandomSchedule` (seeded random switch points). :func:`load_schedule` builds a user's own
schedule from an import path ``"package.module:Name"``.
"""

from __future__ import annotations

import bisect
import hashlib
import importlib
import operator
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.types import Target

__all__ = [
    "Phase",
    "PiecewiseSchedule",
    "GradualSchedule",
    "PeriodicSchedule",
    "RandomSchedule",
    "load_schedule",
]


def _check_clock(t: int) -> int:
    if isinstance(t, bool):
        raise TypeError(f"clock t must be an int, got a bool: {t!r}")
    try:
        t = operator.index(t)  # ints and numpy integers
    except TypeError:
        raise TypeError(f"clock t must be an int, got {type(t).__name__}: {t!r}") from None
    if t < 0:
        raise ValueError(f"clock t must be >= 0, got {t}")
    return t


def _check_candidates(candidates: Sequence[str], where: str) -> tuple[str, ...]:
    if isinstance(candidates, str):
        raise ValueError(f"{where}: candidates must be a sequence of style names, got the string {candidates!r}")
    cands = tuple(candidates)
    if not cands:
        raise ValueError(f"{where}: candidates is empty")
    if len(set(cands)) != len(cands):
        raise ValueError(f"{where}: candidates {cands} contain a duplicate")
    return cands


@dataclass(frozen=True)
class Phase:
    """One stretch of constant target: clocks ``start <= t < end`` want ``style``, and the prompt
    lists ``candidates`` (which must include ``style``)."""

    style: str
    start: int
    end: int
    candidates: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.candidates, str):
            raise ValueError(
                f"phase {self.style!r}: candidates must be a sequence of style names, got the string {self.candidates!r}"
            )
        # Accept lists from YAML/JSON; store an immutable tuple.
        object.__setattr__(self, "candidates", tuple(self.candidates))


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
            _check_candidates(p.candidates, where)
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
        t = _check_clock(t)
        return bisect.bisect_right(self._starts, t) - 1

    def target(self, t: int) -> Target:
        p = self._phases[self.phase_index(t)]
        return Target(style=p.style, candidates=p.candidates)

    def switch_points(self) -> list[int]:
        """Phase starts where the style changes (a change of candidates alone is not a switch)."""
        return [
            cur.start for prev, cur in zip(self._phases, self._phases[1:]) if cur.style != prev.style
        ]

    def phases(self) -> list[tuple[int, int, str]]:
        return [(p.start, p.end, p.style) for p in self._phases]

    def __repr__(self) -> str:
        return f"PiecewiseSchedule({self.phases()})"


def _unit_hash(seed: int, t: int) -> float:
    """A uniform draw in [0, 1) that depends only on (seed, t), stable across processes."""
    digest = hashlib.blake2b(f"{seed}:{t}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


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
        t = _check_clock(t)
        w = self._window_at(t)
        if w is None:
            return 0.0
        lo, hi, _, _ = w
        return (t - lo + 0.5) / (hi - lo)

    def target(self, t: int) -> Target:
        t = _check_clock(t)
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


def _check_styles(styles: Sequence[str], name: str) -> list[str]:
    if isinstance(styles, str):
        raise ValueError(f"{name}: styles must be a list of style names, got the string {styles!r}")
    styles = list(styles)
    if not styles:
        raise ValueError(f"{name}: styles is empty")
    return styles


def _resolve_candidates(styles: Sequence[str], candidates: Sequence[str] | None, name: str) -> tuple[str, ...]:
    if candidates is None:
        return tuple(dict.fromkeys(styles))
    cands = _check_candidates(candidates, name)
    missing = [s for s in dict.fromkeys(styles) if s not in cands]
    if missing:
        raise ValueError(f"{name}: styles {missing} are not in candidates {cands}")
    return cands


class PeriodicSchedule:
    """Cycles through ``styles`` (in order, wrapping around), ``period`` episodes each.

    ``candidates`` (default: the distinct styles, in order) is the same at every clock.
    ``horizon`` bounds ``switch_points()``/``phases()``, since the cycle never ends; without it
    those two methods need an explicit ``until``.
    """

    def __init__(
        self,
        styles: Sequence[str],
        period: int,
        candidates: Sequence[str] | None = None,
        horizon: int | None = None,
    ) -> None:
        self.styles = _check_styles(styles, "PeriodicSchedule")
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError(f"PeriodicSchedule: period must be an int >= 1, got {period!r}")
        self.period = period
        self.candidates = _resolve_candidates(self.styles, candidates, "PeriodicSchedule")
        if horizon is not None and (not isinstance(horizon, int) or horizon < 0):
            raise ValueError(f"PeriodicSchedule: horizon must be an int >= 0 or None, got {horizon!r}")
        self.horizon = horizon

    def target(self, t: int) -> Target:
        t = _check_clock(t)
        return Target(style=self.styles[(t // self.period) % len(self.styles)], candidates=self.candidates)

    def _until(self, until: int | None) -> int:
        until = self.horizon if until is None else until
        if until is None:
            raise ValueError(
                "PeriodicSchedule cycles forever: pass horizon=<run length> to the constructor "
                "(or until=... here) to list its switch points or phases"
            )
        return until

    def phases(self, until: int | None = None) -> list[tuple[int, int, str]]:
        """Maximal runs of one style (consecutive equal styles merge) up to ``until`` (default: horizon)."""
        until = self._until(until)
        out: list[tuple[int, int, str]] = []
        for start in range(0, until, self.period):
            style = self.target(start).style
            end = min(start + self.period, until)
            if out and out[-1][2] == style:
                out[-1] = (out[-1][0], end, style)
            else:
                out.append((start, end, style))
        return out

    def switch_points(self, until: int | None = None) -> list[int]:
        return [start for start, _, _ in self.phases(until)[1:]]

    def __repr__(self) -> str:
        return f"PeriodicSchedule({self.styles}, period={self.period}, horizon={self.horizon})"


class RandomSchedule:
    """Switch points drawn up front from a seeded RNG: phase lengths are
    ``min_phase + round(Exponential(mean = mean_phase - min_phase))`` (so the mean length is about
    ``mean_phase``), the first style is drawn uniformly and each next style uniformly among the
    *other* styles (never the same style twice in a row). Phases are drawn until they cover
    ``horizon``; beyond the last phase the last target holds. Every phase, the last included,
    is at least ``min_phase`` long.
    """

    def __init__(
        self,
        styles: Sequence[str],
        mean_phase: int,
        min_phase: int,
        horizon: int,
        seed: int = 0,
        candidates: Sequence[str] | None = None,
    ) -> None:
        styles = list(dict.fromkeys(_check_styles(styles, "RandomSchedule")))
        if len(styles) < 2:
            raise ValueError(f"RandomSchedule needs at least 2 distinct styles to switch between, got {styles}")
        if not isinstance(min_phase, int) or min_phase < 1:
            raise ValueError(f"RandomSchedule: min_phase must be an int >= 1, got {min_phase!r}")
        if mean_phase < min_phase:
            raise ValueError(f"RandomSchedule: mean_phase ({mean_phase}) must be >= min_phase ({min_phase})")
        if not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"RandomSchedule: horizon must be an int >= 1, got {horizon!r}")
        self.styles = styles
        self.mean_phase, self.min_phase, self.horizon, self.seed = mean_phase, min_phase, horizon, seed
        self.candidates = _resolve_candidates(styles, candidates, "RandomSchedule")

        rng = random.Random(seed)
        extra_mean = mean_phase - min_phase
        phases: list[Phase] = []
        start = 0
        style = rng.choice(styles)
        while start < horizon:
            extra = 0 if extra_mean == 0 else int(round(rng.expovariate(1.0 / extra_mean)))
            end = start + min_phase + extra
            phases.append(Phase(style, start, end, self.candidates))
            start = end
            style = rng.choice([s for s in styles if s != style])
        self._piecewise = PiecewiseSchedule(phases)

    def target(self, t: int) -> Target:
        return self._piecewise.target(t)

    def switch_points(self) -> list[int]:
        return self._piecewise.switch_points()

    def phases(self) -> list[tuple[int, int, str]]:
        return self._piecewise.phases()

    def __repr__(self) -> str:
        return (
            f"RandomSchedule({self.styles}, mean_phase={self.mean_phase}, min_phase={self.min_phase}, "
            f"horizon={self.horizon}, seed={self.seed})"
        )


def _import_object(path: str) -> Any:
    """Resolve ``"package.module:Name"`` (``Name`` may be dotted: ``"pkg.mod:Outer.Inner"``).
    Raises ValueError with a message naming what went wrong."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise ValueError(f"import path must look like 'package.module:Name', got {path!r}")
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"import path must look like 'package.module:Name', got {path!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r} (from {path!r}): {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})") from e
    return obj


def load_schedule(path: str, **args: Any) -> Any:
    """Build a user's own drift schedule from an import path ``"package.module:Name"``.

    ``Name`` is a class or factory called with ``**args``, or (with no args) a ready schedule
    object. The result must satisfy the DriftSchedule protocol (callable ``target`` and
    ``switch_points``). Every failure raises ValueError with a message naming the path.
    """
    obj = _import_object(path)
    if isinstance(obj, type) or (callable(obj) and not _is_schedule(obj)):
        try:
            obj = obj(**args)
        except TypeError as e:
            raise ValueError(f"cannot build schedule {path!r} with arguments {args}: {e}") from e
    elif args:
        raise ValueError(f"{path!r} is not a class or factory, so it cannot take arguments {args}")
    if not _is_schedule(obj):
        raise ValueError(
            f"{path!r} gave a {type(obj).__name__}, which is not a drift schedule: it needs callable "
            f"methods target(t) -> Target and switch_points() -> list[int]"
        )
    return obj


def _is_schedule(obj: Any) -> bool:
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "target", None))
        and callable(getattr(obj, "switch_points", None))
    )

