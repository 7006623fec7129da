import pytest

from router.cost_guard import CostGuard, miscalibrated


def test_offset_rises_when_over_budget_and_returns_to_zero() -> None:
    guard = CostGuard(0.4, window=50)
    for _ in range(100):
        guard.record(0.8, 1.0, escalated=True)
    assert guard.threshold_offset() > 0.3
    for _ in range(2000):
        guard.record(0.05, 1.0, escalated=False)
    assert guard.threshold_offset() == 0.0


def test_closed_loop_keeps_share_under_budget() -> None:
    # Toy cascade: cheap costs 0.1, escalation 1.1; a request escalates when its score < 0.7 - offset.
    guard = CostGuard(0.4)
    for i in range(5000):
        score = (i * 0.6180339887) % 1.0
        escalated = score < 0.7 - guard.threshold_offset()
        guard.record(1.1 if escalated else 0.1, 1.0, escalated)
    share = guard.realized_cost_share()
    assert share is not None and share <= 0.4
    assert share > 0.3  # it spends the budget rather than starving quality


def test_stats() -> None:
    guard = CostGuard(1.0, window=4)
    assert guard.realized_cost_share() is None and guard.escalation_rate() is None
    for e in (True, False, True, True, True):
        guard.record(0.5, 1.0, e)
    assert guard.realized_cost_share() == pytest.approx(0.5)
    assert guard.escalation_rate() == 0.75 and guard.window_n() == 4
    assert guard.threshold_offset() == 0.0  # under budget: configured behaviour


def test_miscalibrated() -> None:
    assert miscalibrated(0.95, 100)
    assert not miscalibrated(0.94, 1000)
    assert not miscalibrated(1.0, 99)


def test_budget_range() -> None:
    with pytest.raises(ValueError):
        CostGuard(0.0)
    with pytest.raises(ValueError):
        CostGuard(1.5)
