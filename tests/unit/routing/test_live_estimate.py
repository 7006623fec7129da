import math
import random

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


def _influence_reference(samples: list[ExploreSample], s: float) -> tuple[float, float]:
    """The estimate and its standard error from per-sample influence values (numpy, the definition)."""
    a = np.array([x.cheap_quality for x in samples])
    b = np.array([x.strong_quality for x in samples])
    num, den = s * b.mean() + (1 - s) * a.mean(), s * b.mean() + (1 - s) * b.mean()
    share = num / den
    infl = ((1 - s) * a + s * b - share * ((1 - s) * b + s * b)) / den
    return share, float(infl.std(ddof=1)) / math.sqrt(len(samples))


def test_running_sums_give_the_per_sample_influence_interval() -> None:
    rng = random.Random(11)
    samples = [
        ExploreSample(rng.choice([0.0, 1.0, 0.5]), rng.choice([1.0, 0.8]), 0.1, 1.0) for _ in range(300)
    ]
    share, se = _influence_reference(samples, 0.3)
    est = estimate(samples, 0.3)
    assert est is not None
    assert est.quality_share == pytest.approx(share, rel=1e-9)
    assert (est.ci90_high - est.ci90_low) / 2 == pytest.approx(1.6448536269514722 * se, rel=1e-6)


def test_a_window_whose_samples_all_agree_still_has_an_interval() -> None:
    est = estimate([ExploreSample(1.0, 1.0, 0.1, 1.0)] * 5, 0.0)
    assert est is not None and est.quality_share == 1.0
    assert est.ci90_low < 0.9  # not [1, 1]: five agreeing samples are not certainty


def test_the_window_holds_one_bucket_per_second_whatever_the_rate() -> None:
    win = EstimateWindow(60.0)
    for i in range(100_000):  # 1,000 requests a second for 100 s
        win.routed(i % 3 == 0, i / 1000)
    assert len(win._buckets) <= 61
    est_now = 99.999
    win.sample(ExploreSample(1.0, 1.0, 0.1, 1.0), est_now)
    win.sample(ExploreSample(0.0, 1.0, 0.1, 1.0), est_now)
    est = win.estimate(est_now)
    assert est is not None and est.n == 2
    assert est.quality_share == pytest.approx((1 / 3) + (2 / 3) * 0.5, abs=0.01)
    assert win.estimate(est_now + 120) is None  # everything expired
