"""The paired verdict's interval over seeds keeps its nominal coverage when each seed gives several
correlated events (analysis/coverage.py): simulated with a known effect at 5 and 10 seeds; treating
the events as independent does not."""

import numpy as np
import pytest
from scipy import stats

from analysis.coverage import coverage_table, intervals


def test_seed_means_t_by_hand():
    d = np.array([[[1.0, 3.0], [2.0, 2.0], [6.0, 4.0]]])  # one replicate, 3 seeds x 2 events: seed means 2, 2, 5
    lo, hi = intervals(d, "seed_means_t", 0.95, np.random.default_rng(0), 10)[0]
    half = stats.t.ppf(0.975, 2) * np.std([2.0, 2.0, 5.0], ddof=1) / np.sqrt(3)
    assert (lo, hi) == pytest.approx((3.0 - half, 3.0 + half))


@pytest.mark.parametrize("noise", ["normal", "skewed"])
def test_coverage_of_the_seed_means_t_holds_and_iid_events_under_cover(noise):
    table = coverage_table([5, 10], reps=3000, events=4, rho=0.5, noise=noise).set_index(["seeds", "method"])
    for n in (5, 10):
        assert 0.93 <= table.loc[(n, "seed_means_t"), "coverage"] <= 0.97
        assert table.loc[(n, "events_as_iid_t"), "coverage"] < 0.85  # the clustering matters
    assert table.loc[(5, "cluster_bootstrap"), "coverage"] < 0.9  # a percentile bootstrap at 5 seeds is too narrow
