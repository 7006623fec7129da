import random

import pytest

from router.calibration import LiveCalibration


def _feed(cal: LiveCalibration, n: int, seed: int, power: float = 1.0) -> None:
    r = random.Random(seed)
    for _ in range(n):
        cal.observe(r.random() ** power)


def test_no_cut_before_min_samples() -> None:
    cal = LiveCalibration(0.3, window=500, min_samples=200)
    _feed(cal, 199, 0)
    assert cal.cut() is None
    _feed(cal, 1, 1)
    assert cal.cut() is not None


@pytest.mark.parametrize("target", [0.1, 0.3, 0.5])
def test_realized_share_tracks_target(target: float) -> None:
    cal = LiveCalibration(target, window=1000, min_samples=200)
    _feed(cal, 4000, 2, power=2.0)
    share = cal.realized_strong_share()
    assert share is not None and abs(share - target) < 0.03


def test_follows_a_distribution_shift() -> None:
    cal = LiveCalibration(0.3, window=500)
    _feed(cal, 2000, 3, power=3.0)  # mostly easy
    before = cal.cut()
    _feed(cal, 2000, 4, power=0.3)  # mostly hard
    after = cal.cut()
    assert before is not None and after is not None and after > before + 0.2
    share = cal.realized_strong_share()
    assert share is not None and abs(share - 0.3) < 0.05


def test_peers_merge_without_double_counting() -> None:
    a, b = LiveCalibration(0.5, min_samples=200), LiveCalibration(0.5, min_samples=200)
    r = random.Random(5)
    for _ in range(150):
        a.observe(r.random() * 0.5)  # a sees low scores only
        b.observe(0.5 + r.random() * 0.5)  # b sees high scores only
    assert a.cut() is None  # 150 < 200 on its own
    a.merge_bytes([b.to_bytes()])
    a.merge_bytes([b.to_bytes()])  # re-merging replaces, so still 300 scores
    cut = a.cut()
    assert cut is not None and 0.4 < cut < 0.6  # median of the union, not of a's own


def test_rejects_bad_target() -> None:
    with pytest.raises(ValueError):
        LiveCalibration(1.0)


def test_domain_switch_windows_stay_near_target() -> None:
    from eval.routing.calibration_replay import windows_after_switches

    r = random.Random(6)
    easy = [r.random() ** 3 for _ in range(2000)]
    hard = [r.random() ** 0.3 for _ in range(1000)]
    (after,) = windows_after_switches([easy, hard], 0.3)
    assert len(after) == 5 and all(abs(s - 0.3) <= 0.07 for s in after)
