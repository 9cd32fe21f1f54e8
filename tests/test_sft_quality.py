"""SFT on its own, with tolerances rather than exact rows: the default scenario's SFT policy (seed 0)
reaches its acceptance bar, and its loss curve stays within a band.

SFT runs hundreds of steps, so a last-bit difference between processors (native kernels) becomes
another policy; the exact-row tests start from a shipped policy instead (tests/test_golden.py).
The band was measured on this code under both portable and native kernels (docs/results.md,
"SFT's loss curve"), and is wide enough for either; a change to the model, the corpus or the
optimiser that slows or breaks learning leaves it."""

from testbed.models.sft import LOSS_CURVE_EVERY, load_or_train_policy
from testbed.runtimes.starting import sft_evaluator
from testbed.scenario.schema import load_scenario
from tests.test_golden import ROOT

# mean loss over steps [i * LOSS_CURVE_EVERY, (i + 1) * LOSS_CURVE_EVERY): (step index, low, high)
# Measured (mean loss per 50 steps): native 3.960 1.462 1.110 0.973 0.771 (then 0.660 0.622, passed at 350
# steps), portable 3.954 1.444 1.103 0.934 0.741 (passed at 250). The first check falls at step 250.
BAND = [(0, 3.6, 4.3), (1, 1.2, 1.7), (2, 0.9, 1.3), (3, 0.75, 1.15), (4, 0.55, 0.95)]


def test_default_sft_reaches_its_bar_with_a_loss_curve_in_band(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CACHE", str(tmp_path))  # always trained here, never from a cache
    scenario = load_scenario(ROOT / "scenarios/style_shift.yaml")
    cfg = scenario.policy
    _, _, report = load_or_train_policy(cfg, scenario.world.archetypes, evaluate=sft_evaluator(scenario), log=print)
    assert report["passed"], report["eval"]
    assert report["eval"]["quality"] >= cfg.sft.min_quality
    assert all(report["eval"]["style_shares"].get(s, 0) >= cfg.sft.min_style_share for s in scenario.world.archetypes)
    curve = report["loss_curve"]
    assert len(curve) == report["steps"] // LOSS_CURVE_EVERY
    assert all(a > b for a, b in zip(curve[:5], curve[1:5]))  # it learns from the start
    assert report["final_loss"] <= 0.95
    for index, low, high in BAND:
        assert low <= curve[index] <= high, (index, curve[index], (low, high))
