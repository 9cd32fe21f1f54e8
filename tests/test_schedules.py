"""Drift schedules: targets around boundaries, validation, gradual mixing, periodic and random
switches, and loading a user's schedule by import path."""

from __future__ import annotations

import pytest

from testbed.envs.schedules import (
    GradualSchedule,
    PeriodicSchedule,
    Phase,
    PiecewiseSchedule,
    RandomSchedule,
    build_schedule,
    check_schedule,
)
from testbed.protocols import DriftSchedule
from testbed.types import Target

C12 = ("academic", "cute", "chuunibyou")
C3 = ("classical", "cute", "chuunibyou")


def paper_phases(a: int = 150, b: int = 300, end: int = 420) -> list[Phase]:
    return [
        Phase("cute", 0, a, C12),
        Phase("chuunibyou", a, b, C12),
        Phase("classical", b, end, C3),
    ]


# ---- piecewise -------------------------------------------------------------------------------


def test_piecewise_targets_at_and_around_boundaries():
    s = PiecewiseSchedule(paper_phases())
    assert isinstance(s, DriftSchedule)
    assert s.target(0) == Target("cute", C12)
    assert s.target(149) == Target("cute", C12)
    assert s.target(150) == Target("chuunibyou", C12)
    assert s.target(299) == Target("chuunibyou", C12)
    assert s.target(300) == Target("classical", C3)
    assert s.target(419) == Target("classical", C3)
    # beyond the last phase's end the last target holds
    assert s.target(420) == Target("classical", C3)
    assert s.target(10**6) == Target("classical", C3)
    assert s.switch_points() == [150, 300]
    assert s.phases() == [(0, 150, "cute"), (150, 300, "chuunibyou"), (300, 420, "classical")]
    with pytest.raises(ValueError, match=">= 0"):
        s.target(-1)


def test_piecewise_candidate_change_alone_is_not_a_switch():
    s = PiecewiseSchedule([Phase("cute", 0, 10, C12), Phase("cute", 10, 20, C3)])
    assert s.switch_points() == []
    assert s.target(10).candidates == C3
    with pytest.raises(ValueError, match="got the string 'cute'"):
        Phase("cute", 0, 10, "cute")
    # phases from YAML: dicts with list candidates
    from_yaml = PiecewiseSchedule([{"style": "cute", "start": 0, "end": 5, "candidates": ["cute", "academic"]}])
    assert from_yaml.target(7) == Target("cute", ("cute", "academic"))


@pytest.mark.parametrize(
    ("phases", "pattern"),
    [
        ([], "at least one phase"),
        ([Phase("cute", 0, 10, C12), Phase("chuunibyou", 12, 20, C12)], r"phase 1 .*gap.*ends at 10.*starts at 12"),
        ([Phase("cute", 0, 10, C12), Phase("chuunibyou", 8, 20, C12)], r"phase 1 .*overlaps phase 0.*ends at 10"),
        ([Phase("cute", 0, 10, C12), Phase("chuunibyou", 10, 10, C12)], r"phase 1 .*start=10, end=10.* is empty"),
        (
            [Phase("cute", 0, 10, C12), Phase("classical", 10, 20, C12)],
            r"phase 1 .*'classical' is not in its candidates",
        ),
        ([Phase("cute", 5, 10, C12)], r"phase 0 .*first phase must start at 0"),
        ([Phase("cute", 0, 10, ())], r"phase 0 .*candidates is empty"),
    ],
    ids=["empty", "gap", "overlap", "empty-phase", "style-not-candidate", "not-at-zero", "no-candidates"],
)
def test_piecewise_validation_names_the_problem(phases, pattern):
    with pytest.raises(ValueError, match=pattern):
        PiecewiseSchedule(phases)


# ---- gradual ---------------------------------------------------------------------------------


def test_gradual_before_after_and_linear_inside_the_window():
    window = 400
    s = GradualSchedule(
        [Phase("cute", 0, 1000, C12), Phase("chuunibyou", 1000, 2000, C12), Phase("classical", 2000, 3000, C3)],
        window=window,
        seed=7,
    )
    assert s.windows() == [(800, 1200), (1800, 2200)]
    assert s.switch_points() == [1000, 2000]
    assert all(s.target(t) == Target("cute", C12) for t in range(800))
    assert all(s.target(t) == Target("chuunibyou", C12) for t in range(1200, 1800))
    assert all(s.target(t) == Target("classical", C3) for t in range(2200, 3500))

    # inside: the new style's share rises roughly linearly; quarter shares ~ 1/8, 3/8, 5/8, 7/8
    lo = 1800
    styles = [s.target(t).style for t in range(lo, lo + window)]
    assert set(styles) == {"chuunibyou", "classical"}
    q = window // 4
    shares = [sum(st == "classical" for st in styles[i * q : (i + 1) * q]) / q for i in range(4)]
    for share, expected in zip(shares, [0.125, 0.375, 0.625, 0.875]):
        assert abs(share - expected) < 0.12, shares
    assert shares == sorted(shares)
    assert abs(sum(st == "classical" for st in styles) / window - 0.5) < 0.08
    # candidates during the window: the union, old phase's order first
    assert s.target(lo).candidates == ("academic", "cute", "chuunibyou", "classical")
    assert s.new_style_probability(lo) == pytest.approx(0.5 / window)
    assert s.new_style_probability(lo + window - 1) == pytest.approx(1 - 0.5 / window)


def test_gradual_is_a_pure_function_of_seed_and_t():
    def make(seed):
        return GradualSchedule(paper_phases(), window=100, seed=seed)

    a, b, c = make(1), make(1), make(2)
    ts = list(range(100, 200))
    forward = [a.target(t) for t in ts]
    assert [a.target(t) for t in reversed(ts)] == forward[::-1]  # call order does not matter
    assert [b.target(t) for t in ts] == forward
    assert [c.target(t) for t in ts] != forward


def test_gradual_window_must_fit():
    with pytest.raises(ValueError, match=r"window 400 around the boundary at 150 .*before phase 0 starts"):
        GradualSchedule(paper_phases(), window=400)
    short_middle = [Phase("cute", 0, 100, C12), Phase("chuunibyou", 100, 120, C12), Phase("classical", 120, 300, C3)]
    with pytest.raises(ValueError, match=r"window 60 around the boundary at 100 .*after phase 1 ends \(120\)"):
        GradualSchedule(short_middle, window=60)
    with pytest.raises(ValueError, match="windows overlap"):
        GradualSchedule(paper_phases(a=100, b=200, end=400), window=150)
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        GradualSchedule(paper_phases(), window=-2)
    step = GradualSchedule(paper_phases(), window=0)
    assert [step.target(t).style for t in (149, 150)] == ["cute", "chuunibyou"]


# ---- periodic --------------------------------------------------------------------------------


def test_periodic_cycles():
    s = PeriodicSchedule(["cute", "chuunibyou", "classical"], period=10, horizon=65)
    styles = [s.target(t).style for t in range(0, 70, 5)]
    assert styles == [
        "cute", "cute", "chuunibyou", "chuunibyou", "classical", "classical", "cute",
        "cute", "chuunibyou", "chuunibyou", "classical", "classical", "cute", "cute",
    ]  # fmt: skip
    assert s.target(9).style == "cute" and s.target(10).style == "chuunibyou"
    assert s.target(0).candidates == ("cute", "chuunibyou", "classical")
    assert s.switch_points() == [10, 20, 30, 40, 50, 60]
    assert s.phases()[-1] == (60, 65, "cute")
    with pytest.raises(ValueError, match="horizon"):
        PeriodicSchedule(["cute", "classical"], period=10).switch_points()
    with pytest.raises(ValueError, match=r"not in candidates"):
        PeriodicSchedule(["cute", "classical"], period=10, candidates=C12)


# ---- random ----------------------------------------------------------------------------------

STYLES = ["academic", "cute", "chuunibyou", "classical"]


def test_random_deterministic_per_seed_and_different_across_seeds():
    a = RandomSchedule(STYLES, mean_phase=60, min_phase=20, horizon=2000, seed=3)
    b = RandomSchedule(STYLES, mean_phase=60, min_phase=20, horizon=2000, seed=3)
    c = RandomSchedule(STYLES, mean_phase=60, min_phase=20, horizon=2000, seed=4)
    assert a.phases() == b.phases()
    assert a.switch_points() == b.switch_points()
    assert a.phases() != c.phases()
    assert [a.target(t) for t in range(0, 2000, 7)] == [b.target(t) for t in range(0, 2000, 7)]


@pytest.mark.parametrize("seed", range(5))
def test_random_never_repeats_and_respects_min_phase(seed):
    s = RandomSchedule(STYLES, mean_phase=50, min_phase=30, horizon=3000, seed=seed)
    phases = s.phases()
    assert phases[0][0] == 0 and phases[-1][1] >= 3000
    assert all(end - start >= 30 for start, end, _ in phases)
    assert all(p[2] != q[2] for p, q in zip(phases, phases[1:]))
    assert s.switch_points() == [start for start, _, _ in phases[1:]]
    # about horizon / mean_phase phases
    assert 3000 / 50 * 0.6 < len(phases) < 3000 / 50 * 1.5
    assert {st for _, _, st in phases} == set(STYLES)
    assert s.target(0).candidates == tuple(STYLES)


def test_random_needs_two_styles():
    with pytest.raises(ValueError, match="at least 2 distinct styles"):
        RandomSchedule(["cute", "cute"], mean_phase=10, min_phase=5, horizon=100, seed=0)
    with pytest.raises(ValueError, match="mean_phase"):
        RandomSchedule(STYLES, mean_phase=5, min_phase=10, horizon=100, seed=0)


# ---- load_schedule ---------------------------------------------------------------------------


class MySchedule:
    """A user's own schedule: switches from `first` to `second` at `at` (a fraction of the budget)."""

    def __init__(
        self,
        first: str = "cute",
        second: str = "classical",
        at: float = 0.25,
        *,
        budget: int = 40,
        archetypes: tuple[str, ...] = (),
    ) -> None:
        self.first, self.second, self.at = first, second, round(at * budget)

    def target(self, t: int) -> Target:
        return Target(self.first if t < self.at else self.second, (self.first, self.second))

    def switch_points(self) -> list[int]:
        return [self.at]


class NotASchedule:
    def target(self, t: int) -> Target:
        return Target("cute", ("cute",))


READY_MADE = MySchedule(at=0.075)


def test_load_schedule_from_import_path():
    s = build_schedule("tests.test_schedules:MySchedule", {"second": "academic", "at": 0.05}, budget=100, archetypes=())
    assert isinstance(s, MySchedule)
    assert s.target(4).style == "cute" and s.target(5).style == "academic"
    assert s.switch_points() == [5]
    assert build_schedule("tests.test_schedules:READY_MADE", {}, budget=100, archetypes=()) is READY_MADE
    builtin = build_schedule("periodic", {"styles": ["cute", "academic"], "period": 0.04}, budget=100, archetypes=())
    assert builtin.target(4).style == "academic" and builtin.switch_points()[:2] == [4, 8]


@pytest.mark.parametrize(
    ("path", "args", "pattern"),
    [
        ("sawtooth", {}, "unknown schedule 'sawtooth'"),
        ("tests.no_such_module:MySchedule", {}, "cannot import module 'tests.no_such_module'"),
        ("tests.test_schedules:Missing", {}, "has no attribute 'Missing'"),
        ("tests.test_schedules:NotASchedule", {}, "not a drift schedule"),
        ("tests.test_schedules:STYLES", {}, "not a drift schedule"),
        ("tests.test_schedules:MySchedule", {"bogus": 1}, "schedule.args.bogus: not an argument of MySchedule"),
        ("tests.test_schedules:MySchedule", {"budget": 1}, "schedule.args.budget: given by the loop"),
        (
            "tests.test_schedules:READY_MADE",
            {"at": 1},
            "a ready-made schedule, not a class or factory: it takes no args",
        ),
    ],
)
def test_load_schedule_errors(path, args, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_schedule(path, args, budget=100, archetypes=())


# ---- check_schedule: a schedule is checked against the world before any training --------------


class GothicSchedule(MySchedule):
    def target(self, t: int) -> Target:
        return Target("gothic", ("gothic", "cute"))


class PlainStringSchedule(MySchedule):
    def target(self, t: int):
        return "cute"


class LyingSchedule(MySchedule):
    def switch_points(self) -> list[int]:
        return [self.at + 3]


class OfferlessSchedule(MySchedule):
    def target(self, t: int) -> Target:
        return Target("classical", ("cute", "academic"))


@pytest.mark.parametrize(
    ("schedule", "pattern"),
    [
        (GothicSchedule(), "target\\(0\\) has style 'gothic', which is not in world.styles"),
        (PlainStringSchedule(), "target\\(0\\) returned a str \\('cute'\\), not a testbed.types.Target"),
        (LyingSchedule(), "switch_points\\(\\) lists t=13, but target\\(\\) does not change style there"),
        (OfferlessSchedule(), "wants 'classical', which is not among its candidates"),
    ],
)
def test_check_schedule_refuses_what_the_world_cannot_score(schedule, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_schedule(schedule, 40, STYLES)


def test_check_schedule_accepts_the_builtins_and_a_good_plugin():
    check_schedule(MySchedule(), 40, STYLES)
    phases = [Phase("cute", 0, 50, ("cute", "academic")), Phase("academic", 50, 100, ("cute", "academic"))]
    check_schedule(GradualSchedule(phases, window=20, seed=3), 100, STYLES)  # flips inside the window are fine
    check_schedule(PeriodicSchedule(["cute", "academic"], period=7, horizon=100), 100, STYLES)


def test_a_custom_schedule_with_a_foreign_style_stops_the_cli(tmp_path, capsys):
    from testbed.cli.run_command import main

    code = main(
        [
            "tests/data/tiny.yaml",
            "--out",
            str(tmp_path),
            "--set",
            "schedule={type: 'tests.test_schedules:GothicSchedule'}",
        ]
    )
    assert code == 2
    assert "style 'gothic', which is not in world.styles" in " ".join(capsys.readouterr().err.split())
    assert not any(tmp_path.iterdir())  # nothing written, nothing trained
