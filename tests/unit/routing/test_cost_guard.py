import pytest

from router.cost_guard import CostGuard


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


def test_budget_range() -> None:
    with pytest.raises(ValueError):
        CostGuard(0.0)
    with pytest.raises(ValueError):
        CostGuard(1.5)


def test_window_figures_follow_the_last_window_exactly() -> None:
    # The guard keeps running counts: they must equal the figures recomputed from the last `window`.
    guard = CostGuard(0.5, window=7)
    history: list[tuple[float, float, bool]] = []
    for i in range(40):
        cost, strong, escalated = (i % 5) * 0.1, 1.0 + (i % 3), i % 4 != 0
        guard.record(cost, strong, escalated)
        history.append((cost, strong, escalated))
        last = history[-7:]
        assert guard.window_n() == len(last)
        assert guard.escalation_rate() == pytest.approx(sum(e for _, _, e in last) / len(last))
    assert guard.realized_cost_share() == pytest.approx(
        sum(c for c, _, _ in history) / sum(s for _, s, _ in history)
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
def test_a_cost_that_is_not_a_finite_non_negative_number_is_refused(bad: float) -> None:
    guard = CostGuard(0.4)
    for args in ((bad, 1.0), (0.1, bad)):
        with pytest.raises(ValueError):
            guard.record(*args, escalated=False)
    assert guard.window_n() == 0 and guard.realized_cost_share() is None
