"""The cost guard: an online controller that keeps the cascade's realized cost at or under a budget
(a share of what strong-only routing would have cost on the same tokens). Pure: the caller reports each
finished request and applies `threshold_offset()` to the next one's `Cascade.judge`.

The offset is subtracted from every scorer's accept threshold, so a positive offset accepts more cheap
answers (fewer escalations). It integrates the error between the recent cost share (last `window`
requests) and the budget less a small `margin`, clipped to [0, max_offset]: at 0 the cascade runs
exactly as configured, so the guard only ever spends less, never more.

Per request:  offset = guard.threshold_offset(); decision = cascade.judge(..., threshold_offset=offset)
              ...; guard.record(cost_usd, strong_cost_usd, escalated)
"""

from __future__ import annotations

from collections import deque

__all__ = ["MISCALIBRATED_MIN_REQUESTS", "MISCALIBRATED_RATE", "CostGuard", "miscalibrated"]

# "The scorer rejects nearly everything": a cascade that escalates this often is only a slower,
# pricier strong-only route, so the alert fires; below 100 requests the rate is too noisy to page on.
MISCALIBRATED_RATE = 0.95
MISCALIBRATED_MIN_REQUESTS = 100


def miscalibrated(escalation_rate: float, window_n: int) -> bool:
    """True when escalation >= 95 % over >= 100 requests (the miscalibrated-scorer alert)."""
    return window_n >= MISCALIBRATED_MIN_REQUESTS and escalation_rate >= MISCALIBRATED_RATE


class CostGuard:
    def __init__(
        self,
        budget: float,
        window: int = 200,
        rate: float = 0.01,
        margin: float = 0.02,
        max_offset: float = 1.0,
    ) -> None:
        if not 0.0 < budget <= 1.0:
            raise ValueError("cost budget is a share of strong-only cost in (0, 1]")
        if window < 1 or rate <= 0 or margin < 0 or max_offset < 0:
            raise ValueError("window >= 1, rate > 0, margin >= 0, max_offset >= 0")
        self.budget, self.rate, self.margin, self.max_offset = budget, rate, margin, max_offset
        self._recent: deque[tuple[float, float, bool]] = deque(maxlen=window)
        self._cost = self._strong = 0.0
        self._offset = 0.0

    def threshold_offset(self) -> float:
        """How much to lower every accept threshold for the next request (>= 0)."""
        return self._offset

    def record(self, cost: float, strong_cost: float, escalated: bool) -> None:
        """One finished request: its realized cost, the strong tier's price on the same tokens."""
        if cost < 0 or strong_cost < 0:
            raise ValueError("costs must be >= 0")
        self._recent.append((cost, strong_cost, escalated))
        self._cost += cost
        self._strong += strong_cost
        recent = self._share(sum(c for c, _, _ in self._recent), sum(s for _, s, _ in self._recent))
        if recent is not None:
            # Also steer on the running total so an early overspend is paid back, not just stopped.
            total = self.realized_cost_share()
            assert total is not None
            error = max(recent, total) - (self.budget - self.margin)
            self._offset = min(self.max_offset, max(0.0, self._offset + self.rate * error))

    def realized_cost_share(self) -> float | None:
        """Total realized cost / total strong-only cost so far; None before any priced request."""
        return self._share(self._cost, self._strong)

    def escalation_rate(self) -> float | None:
        """Share of the last `window` requests that escalated; None before any."""
        return sum(e for _, _, e in self._recent) / len(self._recent) if self._recent else None

    def window_n(self) -> int:
        return len(self._recent)

    @staticmethod
    def _share(cost: float, strong: float) -> float | None:
        return cost / strong if strong > 0 else None
