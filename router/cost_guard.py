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

import math
from collections import deque

__all__ = ["MISCALIBRATED_MIN_REQUESTS", "CostGuard"]

# Below this many requests an escalation rate is too noisy to say the scorer rejects nearly
# everything: the gauge stays NaN until then. The alert itself (LLMGatewayCascadeRejectsNearlyAll, the
# chart's files/alerts/gateway.yaml) is computed from the decision counters of every cascade.
MISCALIBRATED_MIN_REQUESTS = 100


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
        # The last `window` requests, one deque per column: `sum` over a deque of floats runs in C
        # (a generator over tuples cost ~10 us per request); escalations are counted as they come.
        self._costs: deque[float] = deque(maxlen=window)
        self._strongs: deque[float] = deque(maxlen=window)
        self._escalated: deque[bool] = deque(maxlen=window)
        self._escalations = 0
        self._cost = self._strong = 0.0
        self._offset = 0.0

    def threshold_offset(self) -> float:
        """How much to lower every accept threshold for the next request (>= 0)."""
        return self._offset

    def record(self, cost: float, strong_cost: float, escalated: bool) -> None:
        """One finished request: its realized cost, the strong tier's price on the same tokens."""
        # NaN would pass a `< 0` check and then poison the totals and the offset for good.
        if not (math.isfinite(cost) and math.isfinite(strong_cost)) or cost < 0 or strong_cost < 0:
            raise ValueError(f"costs must be finite and >= 0, got {cost}, {strong_cost}")
        if len(self._escalated) == self._escalated.maxlen:
            self._escalations -= self._escalated[0]
        self._costs.append(cost)
        self._strongs.append(strong_cost)
        self._escalated.append(escalated)
        self._escalations += escalated
        self._cost += cost
        self._strong += strong_cost
        recent = self._share(sum(self._costs), sum(self._strongs))
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
        n = len(self._escalated)
        return self._escalations / n if n else None

    def window_n(self) -> int:
        return len(self._escalated)

    @staticmethod
    def _share(cost: float, strong: float) -> float | None:
        return cost / strong if strong > 0 else None
