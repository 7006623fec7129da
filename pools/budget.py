"""Retry budget: retries may add at most `ratio` of recent traffic, plus a small floor.

A fixed retry count per request multiplies load exactly when replicas are failing (every request
retries); a budget caps the extra load at `ratio` (Finagle/Envoy style). Requests and retries are
counted with exponential decay over `window_s`, so the budget tracks recent traffic without a
per-request timestamp list. The floor (`min_per_s`) lets a quiet pool still retry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class RetryBudget:
    ratio: float
    min_per_s: float
    window_s: float = 10.0
    requests: float = 0.0
    retries: float = 0.0
    at: float = 0.0
    granted: int = 0  # totals, for metrics
    refused: int = 0

    def _decay(self, now: float) -> None:
        if now > self.at:
            f = math.exp(-(now - self.at) / self.window_s)
            self.requests *= f
            self.retries *= f
            self.at = now

    def record_request(self, now: float) -> None:
        self._decay(now)
        self.requests += 1.0

    def try_retry(self, now: float) -> bool:
        """Spend one retry if the budget allows it."""
        self._decay(now)
        if self.retries + 1.0 <= self.ratio * self.requests + self.min_per_s * self.window_s:
            self.retries += 1.0
            self.granted += 1
            return True
        self.refused += 1
        return False
