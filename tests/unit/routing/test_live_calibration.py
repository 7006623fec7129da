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


def _cut_from_scratch(
    windows: list[list[float]], peers: list[float], routed: list[bool], target: float, gain: float
) -> float | None:
    """The cut as the docstring defines it, every sketch rebuilt from the raw scores."""
    from ddsketch import DDSketch

    merged = DDSketch(0.01)
    for v in [*windows[-2], *windows[-1], *peers]:
        merged.add(v + 1.0)
    if merged.count < 50:
        return None
    error = sum(routed) / len(routed) - target if routed else 0.0
    value = merged.get_quantile_value(min(1.0, max(0.0, 1.0 - target + gain * error)))
    return None if value is None else float(value) - 1.0


def test_incremental_sketches_give_the_cut_rebuilt_from_scratch() -> None:
    # observe() keeps one merged sketch up to date instead of merging per request: across rotations
    # and peers' merges every cut must equal the one computed from all the raw scores.
    target, gain, window, feedback = 0.3, 4.0, 100, 20
    cal = LiveCalibration(target, window=window, min_samples=50, gain=gain, feedback=feedback)
    peer = LiveCalibration(target, window=window, min_samples=50)
    r = random.Random(7)
    windows: list[list[float]] = [[], []]
    peer_scores: list[float] = []
    routed: list[bool] = []
    for i in range(450):
        if i in (120, 260):  # a peer publishes; merging replaces the previous peers' state
            peer_scores = [r.random() ** 0.5 for _ in range(40)]
            fresh = LiveCalibration(target, window=window, min_samples=50)
            for v in peer_scores:
                fresh.observe(v)
            peer = fresh
            cal.merge_bytes([peer.to_bytes()])
        if i == 380:
            peer_scores = []
            cal.merge_bytes([])
        d = r.random() ** 2
        before = cal.cut()
        if before is not None:
            routed = [*routed, d >= before][-feedback:]
        cal.observe(d)
        windows[-1].append(d)
        if len(windows[-1]) == window:
            windows.append([])
        expected = _cut_from_scratch(windows, peer_scores, routed, target, gain)
        got = cal.cut()
        assert (got is None) == (expected is None), i
        assert got is None or got == pytest.approx(expected, abs=1e-12), i
        assert cal.realized_strong_share() == (sum(routed) / len(routed) if routed else None)
