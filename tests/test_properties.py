"""Property-based tests (hypothesis) for three areas:

1. drift schedules (testbed/envs/schedules.py): purity, phase/switch-point consistency, gradual
   windows, periodicity, random phase lengths, input validation;
2. advantage estimators (trainers/advantages.py): token/step GAE against a plain-Python reference
   built from the docstring formulas, observation skipping and padding invariance, group
   baselines, the sliding-window baseline, length-adaptive lambda;
3. judges: the LLM judge's reply parser on arbitrary (hostile) text, exact recovery of an embedded
   verdict, and the rubric judge on arbitrary text.

The hand-computed cases live in test_schedules.py, test_advantages.py, test_judge_server.py and
test_rubric_judge.py; these tests check laws over random inputs instead.
"""

from __future__ import annotations

import json
import math
import os
import random

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from judges.rubric import MAX_CHARS, RubricJudge
from judges.template import VerdictParseError, parse_verdict
from testbed.envs.schedules import (
    GradualSchedule,
    PeriodicSchedule,
    Phase,
    PiecewiseSchedule,
    RandomSchedule,
)
from testbed.types import JudgeRequest, Target, Verdict
from testbed.world import EMOTICONS, STYLES, TOPICS, generate, vocabulary
from trainers.advantages import (
    SlidingWindowBaseline,
    broadcast_to_tokens,
    gae_step_level,
    gae_token_level,
    group_advantages,
    length_adaptive_lambda,
    policy_and_critic_advantages,
)


def prop(n: int = 100) -> settings:
    return settings(
        max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )


# ==============================================================================================
# 1. Drift schedules
# ==============================================================================================
POOL = ("academic", "cute", "chuunibyou", "classical", "plain")


@st.composite
def phase_lists(draw, min_phases: int = 1, max_phases: int = 6, max_len: int = 40) -> list[Phase]:
    """Valid contiguous phases starting at 0; each style is in its (shuffled) candidates."""
    n = draw(st.integers(min_phases, max_phases))
    phases, start = [], 0
    for _ in range(n):
        length = draw(st.integers(1, max_len))
        style = draw(st.sampled_from(POOL))
        others = draw(st.lists(st.sampled_from([s for s in POOL if s != style]), unique=True, max_size=3))
        cands = tuple(draw(st.permutations([style, *others])))
        phases.append(Phase(style, start, start + length, cands))
        start += length
    return phases


def phase_at(phases: list[Phase], t: int) -> Phase:
    """Reference: the phase with start <= t < end, or the last one beyond the end."""
    for p in phases:
        if p.start <= t < p.end:
            return p
    return phases[-1]


def change_points(style_at, until: int) -> list[int]:
    return [t for t in range(1, until) if style_at(t) != style_at(t - 1)]


@prop(150)
@given(phases=phase_lists(), extra=st.integers(0, 10))
def test_piecewise_target_is_the_phase_in_force_and_pure(phases, extra):
    s = PiecewiseSchedule(phases)
    end = phases[-1].end
    ts = range(end + extra + 1)
    forward = [s.target(t) for t in ts]
    for t, got in zip(ts, forward):
        p = phase_at(phases, t)
        assert got == Target(p.style, p.candidates)
        assert got.style in got.candidates
    # pure: call order and instance do not matter
    assert [s.target(t) for t in reversed(ts)] == forward[::-1]
    assert [PiecewiseSchedule(list(phases)).target(t) for t in ts] == forward


@prop(150)
@given(phases=phase_lists())
def test_piecewise_switch_points_are_exactly_the_style_changes(phases):
    s = PiecewiseSchedule(phases)
    end = phases[-1].end
    style = lambda t: s.target(t).style  # noqa: E731
    sps = s.switch_points()
    assert sps == change_points(style, end + 3)
    # between consecutive switch points (and before the first / after the last) the style is constant
    for lo, hi in zip([0, *sps], [*sps, end + 3]):
        assert len({style(t) for t in range(lo, hi)}) == 1
    assert all(style(t) != style(t - 1) for t in sps)
    assert s.phases() == [(p.start, p.end, p.style) for p in phases]


@prop(150)
@given(phases=phase_lists(min_phases=2), data=st.data())
def test_piecewise_gaps_and_overlaps_raise(phases, data):
    i = data.draw(st.integers(1, len(phases) - 1), label="phase")
    delta = data.draw(st.integers(-5, 5).filter(bool), label="shift")  # > 0: gap, < 0: overlap
    p = phases[i]
    bad = list(phases)
    bad[i] = Phase(p.style, p.start + delta, max(p.end, p.start + delta + 1), p.candidates)
    with pytest.raises(ValueError, match=f"phase {i} "):
        PiecewiseSchedule(bad)


@prop(100)
@given(phases=phase_lists(), shift=st.integers(1, 5))
def test_piecewise_first_phase_must_start_at_zero(phases, shift):
    bad = [Phase(p.style, p.start + shift, p.end + shift, p.candidates) for p in phases]
    with pytest.raises(ValueError, match="phase 0 .*start at 0"):
        PiecewiseSchedule(bad)


@prop(100)
@given(phases=phase_lists(), data=st.data())
def test_piecewise_style_outside_candidates_raises(phases, data):
    i = data.draw(st.integers(0, len(phases) - 1), label="phase")
    p = phases[i]
    assume(len(p.candidates) < len(POOL))
    style = data.draw(st.sampled_from([s for s in POOL if s not in p.candidates]), label="style")
    bad = list(phases)
    bad[i] = Phase(style, p.start, p.end, p.candidates)
    with pytest.raises(ValueError, match=f"phase {i} .*not in its candidates"):
        PiecewiseSchedule(bad)


def _window_bounds(phases: list[Phase], window: int) -> list[tuple[int, int]] | None:
    """Reference for GradualSchedule's documented rule: the window around boundary b is
    [b - window//2, b - window//2 + window); it must fit inside its two phases (the last boundary
    may run past the end) and windows may not overlap. None if the rule is violated."""
    out: list[tuple[int, int]] = []
    for k in range(1, len(phases)):
        old, new = phases[k - 1], phases[k]
        lo = new.start - window // 2
        hi = lo + window
        if lo < old.start or (hi > new.end and k < len(phases) - 1) or (out and lo < out[-1][1]):
            return None
        out.append((lo, hi))
    return out


@prop(200)
@given(phases=phase_lists(max_len=30), window=st.integers(0, 30), seed=st.integers(0, 2**32))
def test_gradual_mixes_only_inside_windows(phases, window, seed):
    bounds = _window_bounds(phases, window)
    if bounds is None:
        with pytest.raises(ValueError):
            GradualSchedule(phases, window=window, seed=seed)
        return
    s = GradualSchedule(phases, window=window, seed=seed)
    pw = PiecewiseSchedule(phases)
    assert s.windows() == bounds
    assert s.switch_points() == pw.switch_points()
    end = max(phases[-1].end, bounds[-1][1] if bounds else 0) + 3
    ts = range(end)
    got = [s.target(t) for t in ts]
    for t in ts:
        inside = [k for k, (lo, hi) in enumerate(bounds) if lo <= t < hi]
        if not inside:
            assert got[t] == pw.target(t)
            assert s.new_style_probability(t) == 0.0
            continue
        (k,) = inside
        old, new = phases[k], phases[k + 1]
        lo, _hi = bounds[k]
        assert got[t].style in (old.style, new.style)
        assert got[t].candidates == tuple(dict.fromkeys(old.candidates + new.candidates))
        assert got[t].style in got[t].candidates
        p = s.new_style_probability(t)
        assert 0.0 < p < 1.0
        assert p == pytest.approx((t - lo + 0.5) / window)
    # pure in (phases, window, seed, t): call order and instance do not matter
    assert [s.target(t) for t in reversed(ts)] == got[::-1]
    assert [GradualSchedule(list(phases), window=window, seed=seed).target(t) for t in ts] == got
    if window == 0:
        assert got == [pw.target(t) for t in ts]


@prop(60)
@given(seed=st.integers(0, 2**32))
def test_gradual_share_of_the_new_style_rises_across_a_wide_window(seed):
    # the linear ramp: the first half of a window draws the new style clearly less than the second
    s = GradualSchedule(
        [Phase("cute", 0, 600, ("cute", "academic")), Phase("academic", 600, 1200, ("cute", "academic"))],
        window=400,
        seed=seed,
    )
    styles = [s.target(t).style for t in range(400, 800)]
    first, second = styles[:200].count("academic"), styles[200:].count("academic")
    assert first < 100 < second


style_lists = st.lists(st.sampled_from(POOL), min_size=1, max_size=5)


@prop(150)
@given(styles=style_lists, period=st.integers(1, 15), t=st.integers(0, 10_000), until=st.integers(0, 200))
def test_periodic_cycle_blocks_and_switch_points(styles, period, t, until):
    s = PeriodicSchedule(styles, period=period, horizon=until)
    cycle = period * len(styles)  # `period` is the length of ONE style's stretch, not of the cycle
    tgt = s.target(t)
    assert tgt == s.target(t + cycle) == s.target(t + 7 * cycle)
    assert tgt == s.target(period * (t // period))  # constant within a block of `period` clocks
    assert tgt.style == styles[(t // period) % len(styles)]
    assert tgt.candidates == tuple(dict.fromkeys(styles)) and tgt.style in tgt.candidates
    assert PeriodicSchedule(list(styles), period=period).target(t) == tgt
    style = lambda u: s.target(u).style  # noqa: E731
    assert s.switch_points() == change_points(style, until) == s.switch_points(until)
    ph = s.phases()
    if until:
        assert ph[0][0] == 0 and ph[-1][1] == until
        assert all(a[1] == b[0] and a[2] != b[2] for a, b in zip(ph, ph[1:]))
        assert all(style(u) == st_ for lo, hi, st_ in ph for u in range(lo, hi))
    else:
        assert ph == []


@prop(150)
@given(
    styles=st.lists(st.sampled_from(POOL), min_size=2, max_size=6).filter(lambda s: len(set(s)) >= 2),
    mean_extra=st.integers(0, 30),
    min_phase=st.integers(1, 12),
    horizon=st.integers(1, 400),
    seed=st.integers(0, 2**32),
)
def test_random_phases_respect_min_phase_and_cover_the_horizon(styles, mean_extra, min_phase, horizon, seed):
    args = dict(mean_phase=min_phase + mean_extra, min_phase=min_phase, horizon=horizon, seed=seed)
    s = RandomSchedule(styles, **args)
    ph = s.phases()
    assert ph[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(ph, ph[1:]))  # contiguous
    assert all(end - start >= min_phase for start, end, _ in ph)  # every phase, the last included
    assert ph[-1][1] >= horizon and all(end < horizon for _, end, _ in ph[:-1])  # drawn until covered
    assert all(a[2] != b[2] for a, b in zip(ph, ph[1:]))  # never the same style twice in a row
    assert {st_ for _, _, st_ in ph} <= set(styles)
    if mean_extra == 0:  # mean == min: every phase is exactly min_phase long
        assert all(end - start == min_phase for start, end, _ in ph)
    style = lambda u: s.target(u).style  # noqa: E731
    last = ph[-1][1]
    assert s.switch_points() == [start for start, _, _ in ph[1:]] == change_points(style, last + 5)
    assert all(style(u) == st_ for lo, hi, st_ in ph for u in range(lo, hi))
    assert style(last + 100) == ph[-1][2]  # beyond the last phase the last target holds
    cands = tuple(dict.fromkeys(styles))
    assert all(s.target(u).candidates == cands for u in (0, last - 1, last))
    again = RandomSchedule(list(styles), **args)  # a fresh instance with the same seed
    assert again.phases() == ph
    assert [again.target(u) for u in range(0, last + 5, 3)] == [s.target(u) for u in range(0, last + 5, 3)]


def _all_schedules(phases: list[Phase]) -> list:
    return [
        PiecewiseSchedule(phases),
        GradualSchedule(phases, window=0),
        PeriodicSchedule([p.style for p in phases], period=3),
        RandomSchedule(list(POOL), mean_phase=10, min_phase=2, horizon=50, seed=1),
    ]


@prop(60)
@given(phases=phase_lists(), t=st.integers(max_value=-1))
def test_negative_clock_raises_value_error(phases, t):
    for s in _all_schedules(phases):
        with pytest.raises(ValueError, match=">= 0"):
            s.target(t)


@prop(40)
@given(phases=phase_lists(), t=st.one_of(st.floats(allow_nan=True), st.booleans(), st.text(max_size=3)))
def test_non_integer_clock_raises_type_error(phases, t):
    for s in _all_schedules(phases):
        with pytest.raises(TypeError):
            s.target(t)


# ==============================================================================================
# 2. Advantages
# ==============================================================================================
D = torch.float64
finite = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)
JUNK = (math.nan, math.inf, -math.inf, 1e30)  # at non-action positions: must never be read


@st.composite
def batches(draw, max_b: int = 4, max_t: int = 12):
    """(mask [B,T] bool, rewards [B,T], values [B,T]) in float64; junk (nan/inf) off the mask."""
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(1, max_t))
    mask = torch.tensor(draw(st.lists(st.lists(st.booleans(), min_size=T, max_size=T), min_size=B, max_size=B)))
    grid = lambda: torch.tensor(  # noqa: E731
        draw(st.lists(st.lists(finite, min_size=T, max_size=T), min_size=B, max_size=B)), dtype=D
    )
    rewards, values = grid(), grid()
    junk = draw(st.sampled_from(JUNK))
    rewards[~mask] = junk
    values[~mask] = junk
    return mask, rewards, values


lam_st = st.floats(0.0, 1.0)


def ref_gae_row(r: list[float], v: list[float], m: list[bool], gamma: float, lam: float):
    """The docstring of gae_token_level, literally: a_0..a_{n-1} the action positions,
    delta_j = r(a_j) + gamma V(a_{j+1}) - V(a_j), A(a_j) = delta_j + gamma lam A(a_{j+1}), V(a_n) = A(a_n) = 0."""
    adv, ret = [0.0] * len(m), [0.0] * len(m)
    next_v = next_a = 0.0
    for t in reversed([t for t in range(len(m)) if m[t]]):
        a = r[t] + gamma * next_v - v[t] + gamma * lam * next_a
        adv[t], ret[t] = a, a + v[t]
        next_v, next_a = v[t], a
    return adv, ret


def turns_of(m: list[bool]) -> list[list[int]]:
    out: list[list[int]] = []
    for t, on in enumerate(m):
        if on:
            if t > 0 and m[t - 1]:
                out[-1].append(t)
            else:
                out.append([t])
    return out


def ref_step_row(r, v, m, gamma, lam, mode):
    """gae_step_level's docstring: one step per maximal run of action tokens."""
    turns = turns_of(m)
    R = [sum(r[t] for t in turn) for turn in turns]
    V = [sum(v[t] for t in turn) / len(turn) if mode == "average" else v[turn[-1]] for turn in turns]
    adv, ret = [0.0] * len(m), [0.0] * len(m)
    next_v = next_a = 0.0
    for k in reversed(range(len(turns))):
        a = R[k] + gamma * next_v - V[k] + gamma * lam * next_a
        for t in turns[k]:
            adv[t], ret[t] = a, a + V[k]
        next_v, next_a = V[k], a
    return adv, ret


def lam_arg(draw_lams: list[float], per_row: bool, B: int):
    return torch.tensor(draw_lams[:B], dtype=D) if per_row else draw_lams[0]


@prop(150)
@given(batch=batches(), gamma=lam_st, lams=st.lists(lam_st, min_size=4, max_size=4), per_row=st.booleans())
def test_gae_token_level_matches_the_docstring_formula(batch, gamma, lams, per_row):
    mask, rewards, values = batch
    B = mask.shape[0]
    lam = lam_arg(lams, per_row, B)
    adv, ret = gae_token_level(rewards, values, mask, gamma, lam)
    assert adv.dtype == ret.dtype == D
    for b in range(B):
        lb = lams[b] if per_row else lams[0]
        ea, er = ref_gae_row(rewards[b].tolist(), values[b].tolist(), mask[b].tolist(), gamma, lb)
        assert_close(adv[b], torch.tensor(ea, dtype=D))
        assert_close(ret[b], torch.tensor(er, dtype=D))
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()  # exactly 0, junk never leaks
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


@prop(150)
@given(batch=batches())
def test_gae_gamma_lambda_one_is_reward_to_go_minus_value(batch):
    mask, rewards, values = batch
    adv, ret = gae_token_level(rewards, values, mask, 1.0, 1.0)
    for b in range(mask.shape[0]):
        acts = mask[b].nonzero().flatten().tolist()
        r = rewards[b, acts]
        to_go = r.flip(0).cumsum(0).flip(0)  # sum of rewards from this action token to the last one
        assert_close(ret[b, acts], to_go)
        assert_close(adv[b, acts], to_go - values[b, acts])


@prop(150)
@given(batch=batches(max_b=3), gamma=lam_st, lam=lam_st, data=st.data())
def test_gae_token_level_skips_observations_of_any_length(batch, gamma, lam, data):
    """Inserting non-action columns anywhere (padding, prompt, observations) changes nothing on
    the action tokens, and the new columns get exactly 0."""
    mask, rewards, values = batch
    T = mask.shape[1]
    inserts = data.draw(st.lists(st.integers(0, T), min_size=1, max_size=6), label="insert before")
    cols: list[int] = []  # original column index, or -1 for an inserted non-action column
    for p in range(T + 1):
        cols += [-1] * inserts.count(p)
        if p < T:
            cols.append(p)
    new = torch.tensor([c >= 0 for c in cols])
    src = torch.tensor([max(c, 0) for c in cols])
    m2 = mask[:, src] & new
    junk = data.draw(st.sampled_from(JUNK), label="junk")
    r2 = torch.where(new, rewards[:, src], torch.tensor(junk, dtype=D))
    v2 = torch.where(new, values[:, src], torch.tensor(junk, dtype=D))
    a1, g1 = gae_token_level(rewards, values, mask, gamma, lam)
    a2, g2 = gae_token_level(r2, v2, m2, gamma, lam)
    assert_close(a2[:, new], a1)
    assert_close(g2[:, new], g1)
    assert (a2[:, ~new] == 0).all() and (g2[:, ~new] == 0).all()


@prop(150)
@given(
    batch=batches(),
    gamma=lam_st,
    lams=st.lists(lam_st, min_size=4, max_size=4),
    per_row=st.booleans(),
    mode=st.sampled_from(["average", "last"]),
)
def test_gae_step_level_matches_the_docstring_formula(batch, gamma, lams, per_row, mode):
    mask, rewards, values = batch
    B = mask.shape[0]
    adv, ret = gae_step_level(rewards, values, mask, gamma, lam_arg(lams, per_row, B), mode=mode)
    for b in range(B):
        lb = lams[b] if per_row else lams[0]
        ea, er = ref_step_row(rewards[b].tolist(), values[b].tolist(), mask[b].tolist(), gamma, lb, mode)
        assert_close(adv[b], torch.tensor(ea, dtype=D))
        assert_close(ret[b], torch.tensor(er, dtype=D))
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()


@prop(100)
@given(
    batch=batches(),
    gamma=lam_st,
    lam=lam_st,
    mode=st.sampled_from(["average", "last"]),
    pre=st.integers(0, 4),
    post=st.integers(0, 4),
)
def test_gae_step_level_is_invariant_to_prompt_and_padding_width(batch, gamma, lam, mode, pre, post):
    mask, rewards, values = batch
    B, T = mask.shape

    def pad(x, fill):
        return torch.cat(
            [
                torch.full((B, pre), fill, dtype=x.dtype),
                x,
                torch.full((B, post), fill, dtype=x.dtype),
            ],
            dim=1,
        )

    a1, g1 = gae_step_level(rewards, values, mask, gamma, lam, mode=mode)
    a2, g2 = gae_step_level(pad(rewards, math.nan), pad(values, math.inf), pad(mask, False), gamma, lam, mode=mode)
    assert_close(a2[:, pre : pre + T], a1)
    assert_close(g2[:, pre : pre + T], g1)
    assert (a2[:, :pre] == 0).all() and (a2[:, pre + T :] == 0).all()


@st.composite
def single_token_turn_masks(draw, max_b: int = 4, max_t: int = 12):
    B, T = draw(st.integers(1, max_b)), draw(st.integers(1, max_t))
    rows = []
    for _ in range(B):
        row = draw(st.lists(st.booleans(), min_size=T, max_size=T))
        rows.append([on and not (t > 0 and row[t - 1]) for t, on in enumerate(row)])  # no two adjacent
    return torch.tensor(rows)


@prop(100)
@given(
    mask=single_token_turn_masks(),
    gamma=lam_st,
    lam=lam_st,
    seed=st.integers(0, 2**16),
    mode=st.sampled_from(["average", "last"]),
)
def test_step_level_equals_token_level_when_every_turn_is_one_token(mask, gamma, lam, seed, mode):
    g = torch.Generator().manual_seed(seed)
    rewards, values = torch.randn(mask.shape, dtype=D, generator=g), torch.randn(mask.shape, dtype=D, generator=g)
    a_tok, r_tok = gae_token_level(rewards, values, mask, gamma, lam)
    a_step, r_step = gae_step_level(rewards, values, mask, gamma, lam, mode=mode)
    assert_close(a_step, a_tok)
    assert_close(r_step, r_tok)


@prop(100)
@given(
    batch=batches(),
    gamma=lam_st,
    lam_pol=lam_st,
    lam_crit=lam_st,
    mode=st.sampled_from(["token", "step_average", "step_last"]),
)
def test_decoupled_lambda_is_two_plain_estimators(batch, gamma, lam_pol, lam_crit, mode):
    mask, rewards, values = batch
    adv, ret = policy_and_critic_advantages(rewards, values, mask, gamma, lam_pol, lam_crit, mode=mode)
    if mode == "token":
        fn = lambda lam: gae_token_level(rewards, values, mask, gamma, lam)  # noqa: E731
    else:
        fn = lambda lam: gae_step_level(rewards, values, mask, gamma, lam, mode=mode[5:])  # noqa: E731
    assert_close(adv, fn(lam_pol)[0])
    assert_close(ret, fn(lam_crit)[1])


@prop(150)
@given(lengths=st.lists(st.integers(0, 100_000), min_size=1, max_size=20), alpha=st.floats(1e-3, 10.0))
def test_length_adaptive_lambda_in_unit_interval_and_non_decreasing(lengths, alpha):
    lam = length_adaptive_lambda(lengths, alpha)
    assert lam.dtype == torch.float32 and lam.shape == (len(lengths),)
    assert ((lam >= 0) & (lam <= 1)).all()
    expected = torch.tensor([max(0.0, 1.0 - 1.0 / (alpha * n)) if n else 0.0 for n in lengths])
    assert_close(lam, expected, rtol=1e-5, atol=1e-6)
    # finite lengths never give lambda = 1 (alpha * l < 1e6 here is far from float32 rounding to 1)
    assert (lam < 1).all()
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    sorted_lam = lam[order]
    assert (sorted_lam[1:] >= sorted_lam[:-1]).all()
    assert (lam[[i for i, n in enumerate(lengths) if alpha * n <= 1]] == 0).all()


@st.composite
def grouped_rewards(draw, elements=finite, max_groups: int = 4, max_size: int = 6):
    """(rewards list, group ids list) with interleaved arbitrary integer labels."""
    n_groups = draw(st.integers(1, max_groups))
    labels = draw(st.lists(st.integers(-1000, 1000), min_size=n_groups, max_size=n_groups, unique=True))
    items = []
    for label in labels:
        size = draw(st.integers(1, max_size))
        items += [(draw(elements), label) for _ in range(size)]
    items = draw(st.permutations(items))
    return [r for r, _ in items], [g for _, g in items]


def ref_group(rewards: list[float], ids: list[int], kind: str, eps: float) -> list[float]:
    out = []
    for i, (r, g) in enumerate(zip(rewards, ids)):
        group = [x for x, h in zip(rewards, ids) if h == g]
        G = len(group)
        if G < 2:
            out.append(0.0)
            continue
        mean = sum(group) / G
        if kind == "grpo":
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (G - 1))
            out.append((r - mean) / (std + eps))
        else:
            others = [x for j, (x, h) in enumerate(zip(rewards, ids)) if h == g and j != i]
            out.append(r - sum(others) / len(others))
    return out


@prop(150)
@given(data=grouped_rewards(), kind=st.sampled_from(["grpo", "rloo"]))
def test_group_advantages_match_reference_and_centre_each_group(data, kind):
    rewards, ids = data
    R = torch.tensor(rewards, dtype=D)
    adv = group_advantages(R, torch.tensor(ids), kind=kind)
    assert_close(adv, torch.tensor(ref_group(rewards, ids, kind, 1e-6), dtype=D), rtol=1e-6, atol=1e-6)
    for g in set(ids):
        sel = torch.tensor([h == g for h in ids])
        assert abs(float(adv[sel].sum())) <= 1e-6 * max(1.0, float(adv[sel].abs().max()))  # sums to ~0
        if kind == "grpo" and sel.sum() >= 2:  # GRPO normalises: sample std = std / (std + eps)
            std = float(R[sel].std())
            assert float(adv[sel].std()) == pytest.approx(std / (std + 1e-6), abs=1e-6)


@prop(200)
@given(
    value=st.floats(-1e6, 1e6, allow_nan=False, width=32),
    size=st.integers(1, 12),
    others=grouped_rewards(),
    kind=st.sampled_from(["grpo", "rloo"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
@example(value=123.456, size=5, others=([0.0, 1.0], [1, 1]), kind="grpo", dtype=torch.float32)
@example(value=0.1, size=7, others=([0.0], [1]), kind="grpo", dtype=torch.float32)
def test_group_with_identical_rewards_gets_zero_advantages(value, size, others, kind, dtype):
    """A group whose rewards are all equal carries no signal: its advantages are 0 whatever the
    value and the dtype (GRPO divides by std + eps, so a rounding error in the group mean must not
    be blown up into a +-1 advantage)."""
    rewards = [value] * size + others[0]
    ids = [10_000] * size + others[1]
    adv = group_advantages(torch.tensor(rewards, dtype=dtype), ids, kind=kind)
    assert (adv[:size].abs() <= 1e-6).all(), adv[:size]


@prop(150)
@given(
    data=grouped_rewards(),
    shifts=st.lists(st.floats(-100, 100), min_size=4, max_size=4),
    kind=st.sampled_from(["grpo", "rloo"]),
)
def test_group_advantages_invariant_to_a_constant_per_group(data, shifts, kind):
    rewards, ids = data
    labels = sorted(set(ids))
    # well-conditioned groups only: a spread far below |shift| * 1e-16 would be lost to rounding
    for g in labels:
        grp = [r for r, h in zip(rewards, ids) if h == g]
        assume(max(grp) - min(grp) == 0 or max(grp) - min(grp) > 1e-3)
    shift_of = dict(zip(labels, shifts))
    moved = [r + shift_of[g] for r, g in zip(rewards, ids)]
    a = group_advantages(torch.tensor(rewards, dtype=D), ids, kind=kind)
    b = group_advantages(torch.tensor(moved, dtype=D), ids, kind=kind)
    assert_close(b, a, rtol=1e-6, atol=1e-6)


@prop(100)
@given(
    data=grouped_rewards(),
    kind=st.sampled_from(["grpo", "rloo"]),
    seed=st.integers(0, 2**16),
    offset=st.integers(-50, 50),
)
def test_group_advantages_permutation_and_relabel_equivariant(data, kind, seed, offset):
    rewards, ids = data
    perm = list(range(len(rewards)))
    random.Random(seed).shuffle(perm)
    a = group_advantages(torch.tensor(rewards, dtype=D), ids, kind=kind)
    b = group_advantages(
        torch.tensor([rewards[i] for i in perm], dtype=D), [3 * ids[i] + offset for i in perm], kind=kind
    )
    assert_close(b, a[perm])


@prop(100)
@given(batch=batches(), per_seq=st.lists(finite, min_size=4, max_size=4))
def test_broadcast_to_tokens(batch, per_seq):
    mask = batch[0]
    seq = torch.tensor(per_seq[: mask.shape[0]], dtype=D)
    out = broadcast_to_tokens(seq, mask)
    assert_close(out, torch.where(mask, seq.unsqueeze(1).expand_as(out), torch.zeros_like(out)))


class RefWindow:
    """The SlidingWindowBaseline docstring, literally: push first, then A = r - mean(last `size`)."""

    def __init__(self, size: int, per_prompt: bool) -> None:
        self.size, self.per_prompt, self.hist = size, per_prompt, {}

    def advantages(self, rewards, ids):
        out = []
        for r, p in zip(rewards, ids):
            h = self.hist.setdefault(str(p) if self.per_prompt else "", [])
            h.append(r)
            last = h[-self.size :]
            out.append(r - sum(last) / len(last))
        return out


@prop(150)
@given(
    size=st.integers(1, 8),
    per_prompt=st.booleans(),
    batches_=st.lists(st.lists(st.tuples(finite, st.sampled_from("abc")), max_size=10), min_size=1, max_size=5),
    split=st.integers(0, 5),
)
def test_sliding_window_baseline_matches_reference(size, per_prompt, batches_, split):
    base, ref = SlidingWindowBaseline(size=size, per_prompt=per_prompt), RefWindow(size, per_prompt)
    for i, batch in enumerate(batches_):
        if i == split:  # a checkpoint round trip in the middle changes nothing
            restored = SlidingWindowBaseline()
            restored.load_state_dict(json.loads(json.dumps(base.state_dict())))
            base = restored
        rewards, ids = [r for r, _ in batch], [p for _, p in batch]
        got = base.advantages(rewards, ids)
        assert got == pytest.approx(ref.advantages(rewards, ids), abs=1e-9)
    for key, h in ref.hist.items():
        assert base.mean(key if per_prompt else None) == pytest.approx(sum(h[-size:]) / len(h[-size:]))


# ==============================================================================================
# 3. Judges: reading an LLM's reply, and the rubric judge on arbitrary text
# ==============================================================================================
any_char = st.characters(blacklist_categories=())  # everything, lone surrogates and controls included
any_text = st.text(any_char, max_size=300)
QUALITY_KEYS = ["quality", "Quality", "QUALITY", " quality ", "style", "Style", "STYLE", "reason", "Reason"]
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["cute", "Cute style", "1", "yes", "pass", "0", ""]),
)
json_values = st.recursive(
    json_leaf,
    lambda c: (
        st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(QUALITY_KEYS) | st.text(max_size=5), c, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def json_fragment(draw) -> str:
    """Pieces of replies a model (or a hostile piece echoed back) might produce."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return json.dumps(draw(json_values), ensure_ascii=draw(st.booleans()))
    if kind == 1:  # a verdict-shaped object, any value types
        obj = {draw(st.sampled_from(QUALITY_KEYS)): draw(json_values) for _ in range(draw(st.integers(1, 4)))}
        text = json.dumps(obj) if draw(st.booleans()) else repr(obj)
        return text[: draw(st.integers(0, len(text)))] if draw(st.booleans()) else text  # maybe truncated
    if kind == 2:  # deep nesting
        depth = draw(st.integers(1, 1500))
        return draw(st.sampled_from(['{"a":', "{", "[", "{'a': "])) * depth + draw(st.sampled_from(["", "1", "}"]))
    if kind == 3:  # integers over Python's 4300-digit str<->int limit
        digits = draw(st.integers(4200, 5000))
        return draw(st.sampled_from(['{"quality": %s, "style": "cute"}', "{%s: 1}", "{0x%s: 1}"])) % ("1" * digits)
    if kind == 4:  # Python literals that evaluate but are not JSON (or not hashable)
        return draw(
            st.sampled_from(
                [
                    "{[1]: 2}",
                    "{{}: 1}",
                    "{'quality': 1, 'style': 'cute', 'reason': b'x'}",
                    "{'quality': 1, 'style': 'cute', 'reason': 1j}",
                    "{'quality': 1, 'style': 'cute', 'reason': (1, {2})}",
                    "{'quality': 1j, 'style': b'cute'}",
                    "{(1, 2): 'x', 'style': None}",
                    "{'style': ...}",
                    "{'quality': float('nan')}",
                    "{'quality': 1e999, 'style': 'cute'}",
                    "{-1: 2}",
                    "{'\x00': 1}",
                ]
            )
        )
    if kind == 5:
        return draw(
            st.sampled_from(
                [
                    "```json\n",
                    "\n```",
                    "```",
                    "}",
                    "{",
                    '"',
                    "'",
                    "\\",
                    ":",
                    ",",
                    "NaN",
                    "Infinity",
                    "-Infinity",
                    "\x00",
                    "\ud800",
                ]
            )
        )
    return draw(any_text)


replies = st.one_of(any_text, st.lists(json_fragment(), max_size=6).map("".join))


def check_reply_outcome(result) -> None:
    quality, style, reason = result
    assert quality in (0, 1) and type(quality) is int
    assert isinstance(style, str) and 0 < len(style) <= 40
    assert style == " ".join(style.split()) and style == style.lower()
    assert isinstance(reason, str)


@prop(200)
@given(reply=replies)
@example(reply='{"a":' * 5000)
@example(reply='{"quality": ' + "9" * 5000 + ', "style": "cute"}')
@example(reply="{[1]: 2}")
@example(reply="{'quality': 1, 'style': 'cute', 'reason': b'x'}")
@example(reply="{0x" + "f" * 5000 + ": 1}")
@example(reply="x" * 200_000 + '{"quality": 1, "style": "cute"}' + "\x00" * 1000)
def test_llm_judge_reply_parser_never_raises_anything_else(reply):
    """The LLM judge's reply reader either gives a well-formed verdict or VerdictParseError (the
    documented "unparseable" path: one repair turn, then a verdict carrying the error); nothing
    else may escape, or one odd reply would fail the judge's whole batch."""
    try:
        result = parse_verdict(reply)
    except VerdictParseError:
        return
    check_reply_outcome(result)


@pytest.mark.parametrize(
    "reply",
    [
        '{"a":' * 5000,
        '{"quality": ' + "9" * 5000 + ', "style": "cute"}',
        "{[1]: 2}",
        "{'quality': 1, 'style': 'cute', 'reason': b'x'}",
    ],
    ids=["deep-nesting", "huge-int", "unhashable-key", "non-json-reason"],
)
def test_parse_verdict_itself_raises_only_verdict_parse_error(reply):
    with pytest.raises(VerdictParseError, match="unreadable reply"):
        parse_verdict(reply)


QUALITY_FORMS = [
    (0, 0),
    (1, 1),
    (True, 1),
    (False, 0),
    (0.0, 0),
    (1.0, 1),
    ("1", 1),
    ("0", 0),
    ("yes", 1),
    ("no", 0),
    ("Pass", 1),
    ("FAIL", 0),
    ("passed", 1),
    ("failed", 0),
    ("good", 1),
    ("bad", 0),
    ("ok", 1),
    ("true", 1),
    ("false", 0),
    (" Yes. ", 1),
]
style_names = st.from_regex(r"[a-z][a-z0-9_-]{0,14}( [a-z][a-z0-9-]{0,10})?", fullmatch=True).filter(
    lambda s: not s.endswith(" style") and len(s) <= 40
)
no_braces = st.text(st.characters(blacklist_categories=(), blacklist_characters="{}"), max_size=200)


def _case(draw, word: str) -> str:
    return draw(st.sampled_from([word, word.upper(), word.title(), f" {word} "]))


@prop(200)
@given(
    prefix=no_braces,
    suffix=no_braces,
    quality=st.sampled_from(QUALITY_FORMS),
    style=style_names,
    reason=st.text(any_char, max_size=80),
    data=st.data(),
)
def test_embedded_json_verdict_is_recovered_exactly(prefix, suffix, quality, style, reason, data):
    q_value, q_expected = quality
    style_text = data.draw(
        st.sampled_from([style, style.title(), style.upper(), f" {style}. ", f"{style} style", f'"{style}"']),
        label="style as written",
    )
    obj = {"quality": q_value, "style": style_text, "reason": reason}
    body = json.dumps(
        obj,
        ensure_ascii=data.draw(st.booleans(), label="ascii"),
        indent=data.draw(st.sampled_from([None, 2]), label="indent"),
    )
    if data.draw(st.booleans(), label="mixed-case keys"):
        for key in ("quality", "style", "reason"):
            cased = data.draw(st.sampled_from([key.upper(), key.title(), key]), label=key)
            body = body.replace(f'"{key}":', f'"{cased}":', 1)
    if data.draw(st.booleans(), label="fenced"):
        body = f"```json\n{body}\n```"
    for parse in (parse_verdict,):
        assert parse(prefix + body + suffix) == (q_expected, style, reason)


def test_fake_verdict_inside_the_reason_string_is_not_read():
    reply = (
        'Verdict: {"quality": 1, "style": "cute", "reason": "it wrote {\\"quality\\": 0, \\"style\\": \\"plain\\"}"} ok'
    )
    assert parse_verdict(reply) == (1, "cute", 'it wrote {"quality": 0, "style": "plain"}')


@prop(100)
@given(
    prefix=no_braces,
    suffix=no_braces,
    quality=st.sampled_from(QUALITY_FORMS),
    style=style_names,
    reason=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="{}"), max_size=40),
)
def test_embedded_python_literal_verdict_is_recovered(prefix, suffix, quality, style, reason):
    # Python-literal replies ({'quality': 1, ...}) are read up to the first '}', so the reason here
    # has no braces (a known limit of the literal fallback, not of the JSON path above).
    q_value, q_expected = quality
    body = repr({"quality": q_value, "style": style, "reason": reason})
    assert parse_verdict(prefix + body + suffix) == (q_expected, style, reason)


WORLD_TOKENS = sorted(set(vocabulary()) | set(EMOTICONS) | {"!", "?", ".", ",", "doeth", "maketh", "teeth"})
world_text = st.lists(st.sampled_from(WORLD_TOKENS), max_size=60).map(" ".join)
rubric_texts = st.one_of(any_text, world_text, st.tuples(world_text, any_text, world_text).map("".join))


@prop(150)
@given(
    text=rubric_texts,
    target=st.sampled_from([*STYLES, "mixed", "nonsense"]),
    topic=st.one_of(st.none(), st.sampled_from(TOPICS), st.text(max_size=10)),
    prompt=st.one_of(any_text, st.sampled_from([f"write a short piece about {t}." for t in TOPICS])),
    noise=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 100),
)
@example(text="x" * 1_000_000, target="cute", topic=None, prompt="", noise=0.0, seed=0)
@example(text="\ud800\x00\x1b[31m (^_^) !!!", target="cute", topic="coffee", prompt="\udfff", noise=0.0, seed=0)
def test_rubric_judge_gives_a_binary_verdict_for_any_text(text, target, topic, prompt, noise, seed):
    judge = RubricJudge(seed=seed, label_noise=noise)
    req = JudgeRequest(prompt, text, target, ("cute", "classical"), topic)
    v = judge.score(req)
    assert isinstance(v, Verdict) and v.error is None, v.error
    assert v.quality in (0, 1) and v.style_match in (0, 1)
    assert v.style in (*STYLES, "mixed")
    assert v.reward in (0.0, 1.0) and v.reward == v.quality * v.style_match
    if noise == 0.0:
        assert v.style_match == int(v.style == target)
    if noise == 1.0:  # both labels always flipped
        clean = RubricJudge(seed=seed).score(req)
        assert (v.quality, v.style_match) == (1 - clean.quality, 1 - clean.style_match)
    if len(text) > MAX_CHARS and noise == 0.0:
        assert v.quality == 0  # longer than any acceptable piece
    again = RubricJudge(seed=seed, label_noise=noise).score(req)  # deterministic, fresh instance
    assert (again.quality, again.style_match, again.style, again.raw) == (v.quality, v.style_match, v.style, v.raw)


@prop(60)
@given(
    seed=st.integers(0, 2**16),
    style=st.sampled_from(STYLES),
    topic=st.sampled_from(TOPICS),
    junk=st.text(any_char, min_size=1, max_size=20),
)
def test_rubric_judge_world_pieces_with_junk_appended(seed, style, topic, junk):
    """A generated piece, and the same piece with arbitrary junk appended, get clean binary verdicts."""
    text = generate(style, topic, random.Random(seed))
    judge = RubricJudge()
    v = judge.score(JudgeRequest(f"write a short piece about {topic}.", text, style, (style,), topic))
    assert v.error is None and v.style_match == int(v.style == style)
    w = judge.score(JudgeRequest("", text + junk, style, (style,), topic))
    assert w.error is None and w.reward == w.quality * w.style_match
