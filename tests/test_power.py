"""The planner (analysis/power.py) against hand-computed cases: the sd's interval, the seeds a
margin needs at the pilot's sd and at the interval's ends, and what they cost on K cores."""

from types import SimpleNamespace

import pandas as pd
import pytest

from analysis.power import plan_claim, plan_lines, sd_interval
from analysis.protocol import Claim, load_protocol


def test_sd_interval_by_hand():
    # 5 values: (n-1) s^2 / sigma^2 ~ chi2(4); chi2_{0.975,4} = 11.1433, chi2_{0.025,4} = 0.4844
    assert sd_interval(1.0, 5) == pytest.approx((2 / 11.1433**0.5, 2 / 0.4844**0.5), rel=1e-3)


def pilot(diffs: list[float], mean_y: float = 10.0) -> pd.DataFrame:
    rows = []
    for seed, d in enumerate(diffs):
        for switch in (1, 2):  # both switches carry the seed's difference: its mean over them is d
            rows.append({"run": "pilot", "arm": "a", "seed": seed, "switch": switch, "episodes_to_bar": mean_y + d})
            rows.append({"run": "pilot", "arm": "b", "seed": seed, "switch": switch, "episodes_to_bar": mean_y})
    return pd.DataFrame(rows)


def manifest_runs(cpu: dict[str, float], wall: dict[str, float], seeds: int) -> list:
    arms = {arm: {str(s): {"cpu_s": cpu[arm], "wall_s": wall[arm]} for s in range(seeds)} for arm in cpu}
    return [SimpleNamespace(manifest={"arms": arms, "numerics": {"mode": "portable"}})]


def test_seeds_and_cost_of_a_claim_by_hand():
    claim = Claim(
        id="a_vs_b", source="t", text="a realigns faster", x="a", y="b", endpoint="episodes_to_bar",
        scenario="scenarios/style_shift.yaml", margin="10%",
    )  # fmt: skip
    runs = manifest_runs({"a": 1800.0, "b": 900.0}, {"a": 2000.0, "b": 1000.0}, seeds=5)
    row = plan_claim(claim, {"switch": pilot([1, -1, 1, -1, 0])}, runs, load_protocol(), cores=4)
    # per-seed differences 1, -1, 1, -1, 0: mean 0, sd 1; the margin is 10% of b's mean 10 = 1.
    assert (row["n"], row["diff"], row["sd_diff"], row["difference"]) == (5, 0.0, pytest.approx(1.0), 1.0)
    # paired t, alpha 0.05 two-sided, power 0.8: n = 10 is the first with (t_.975 + t_.8) / sqrt(n) <= 1
    # (n = 9: (2.306 + 0.889) / 3 = 1.065; n = 10: (2.262 + 0.883) / 3.162 = 0.995)
    assert row["seeds"] == 10
    # at the sd interval's lower end 0.599: n = 5 ((2.776 + 0.941) / 2.236 = 1.662 <= 1 / 0.599)
    assert row["seeds_lo"] == 5 and row["seeds_hi"] > 60
    assert row["core_hours"] == pytest.approx(10 * 2700 / 3600)  # 10 seeds x (1800 + 900) CPU seconds
    assert row["wall_hours"] == pytest.approx(5 * 2000 / 3600)  # 20 tasks on 4 cores: 5 waves of the slower arm
    assert "10 seeds [5," in "\n".join(plan_lines(pd.DataFrame([row])))


def test_a_claim_that_cannot_be_tested_gets_its_reason_not_a_seed_count():
    vapo = load_protocol().claim("dis_over_ppo_clip")
    row = plan_claim(vapo, {"segment": pd.DataFrame()}, [], load_protocol())
    assert row["status"].startswith("not testable: in the synchronous runtime") and "seeds" not in row


def test_holm_by_hand():
    from analysis.stats.tests import holm

    # sorted 0.01, 0.02, 0.04 of m = 3: 0.03, 0.04, max(0.04, 0.04) = 0.04; NaN is not a test
    assert holm([0.04, 0.01, float("nan"), 0.02]) == pytest.approx([0.04, 0.03, float("nan"), 0.04], nan_ok=True)
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # 2 x 0.5, then max(1.0, 0.6)


def test_t_and_tost_pvalues_by_hand():
    from analysis.stats.tests import t_pvalue, tost_pvalue

    # t = 2.776 at 4 df is the 0.975 quantile: two-sided p 0.05
    assert t_pvalue(2.776, 1.0, 4) == pytest.approx(0.05, abs=1e-3)
    # diff 0, se 1, margin 3.747 = t_{0.99,4}: each one-sided p is 0.01
    assert tost_pvalue(0.0, 1.0, 4, 3.747) == pytest.approx(0.01, abs=1e-3)
    assert tost_pvalue(3.0, 1.0, 4, 2.0) > 0.5  # outside the margin: not equivalent
