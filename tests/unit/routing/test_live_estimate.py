import numpy as np
import pytest

from router.estimate import EstimateWindow, ExploreSample, estimate


def test_relative_judge_share_is_exact_mixture() -> None:
    samples = [ExploreSample(1.0, 1.0, 1.0, 10.0)] * 3 + [ExploreSample(0.0, 1.0, 1.0, 10.0)]
    est = estimate(samples, routed_strong_share=0.2)
    assert est is not None
    assert est.quality_share == pytest.approx(0.2 + 0.8 * 0.75)
    assert est.ci90_low < est.quality_share < est.ci90_high
    assert est.cost_share == pytest.approx((0.2 * 10 + 0.8 * 1) / 10)
    assert est.n == 4


def test_interval_covers_truth_on_simulated_traffic() -> None:
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        strong = rng.random(400) < 0.8
        cheap = strong & (rng.random(400) < 0.85)
        samples = [ExploreSample(float(c), float(s), 0.1, 1.0) for c, s in zip(cheap, strong, strict=True)]
        est = estimate(samples, routed_strong_share=0.3, strong_quality_of_strong_routed=0.8)
        assert est is not None
        truth = (0.3 * 0.8 + 0.7 * 0.8 * 0.85) / 0.8
        covered += est.ci90_low <= truth <= est.ci90_high
    assert 0.84 <= covered / 200 <= 0.96


def test_empty_and_window_expiry() -> None:
    assert estimate([], 0.5) is None
    win = EstimateWindow(10.0)
    assert win.estimate(0.0) is None
    win.routed(True, 0.0)
    win.routed(False, 5.0)
    win.sample(ExploreSample(1.0, 1.0, 1.0, 2.0), 5.0)
    est = win.estimate(6.0)
    assert est is not None and est.quality_share == pytest.approx(1.0)
    win.routed(False, 12.0)
    assert win.estimate(16.0) is None  # the only sample expired
