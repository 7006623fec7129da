"""The honest live estimate: share of strong-only quality delivered and cost paid, with a 90 % interval.

Exploration sends a random share of the cheap-routed requests to the strong tier as well, so its samples
are an unbiased sample of the cheap-routed traffic with both answers' quality (and cost) beside each
other. The strong-routed traffic delivers exactly what strong-only would, whatever its quality. With
s = the routed strong share (counted, not estimated), a = mean cheap quality and b = mean strong quality
over the samples, and Q = strong quality on strong-routed traffic:

    quality_share = (s Q + (1 - s) a) / (s Q + (1 - s) b)

Q is never observed live (no second answer to grade it against). A relative judge (agreement, grader)
scores the strong answer 1.0 by definition, so Q = 1 = b exactly; with absolute scores the caller may
pass Q, and by default Q = b (the explored strong quality), an assumption stated in the result's
doc. The interval is the delta method on the per-sample influence values (numpy only, deterministic).
Cost share is the same ratio over costs, plus the exploration calls themselves (paid by the gateway).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "EstimateWindow", "ExploreSample", "estimate"]

_Z90 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class ExploreSample:
    cheap_quality: float
    strong_quality: float
    cheap_cost: float
    strong_cost: float


@dataclass(frozen=True, slots=True)
class Estimate:
    quality_share: float
    ci90_low: float
    ci90_high: float
    cost_share: float
    n: int


def _ratio(s: float, q: float, a: float, b: float) -> tuple[float, float]:
    """(numerator, denominator) of the delivered / strong-only ratio."""
    return s * q + (1.0 - s) * a, s * q + (1.0 - s) * b


def estimate(
    samples: Sequence[ExploreSample],
    routed_strong_share: float,
    strong_quality_of_strong_routed: float | None = None,
    explore_rate: float = 0.0,
) -> Estimate | None:
    """None without samples or when strong-only quality is zero (no share to speak of)."""
    if not 0.0 <= routed_strong_share <= 1.0:
        raise ValueError(f"routed_strong_share must be in [0, 1], got {routed_strong_share}")
    if not samples:
        return None
    arr = np.array(
        [(x.cheap_quality, x.strong_quality, x.cheap_cost, x.strong_cost) for x in samples], dtype=np.float64
    )
    a, b, cc, sc = arr.T
    n, s = len(samples), routed_strong_share
    q_given = strong_quality_of_strong_routed
    q = float(b.mean()) if q_given is None else q_given
    num, den = _ratio(s, q, float(a.mean()), float(b.mean()))
    if den <= 0:
        return None
    share = num / den
    # Influence of each sample on the ratio (first-order); with Q = b-bar, Q moves with b too.
    dq_db = s if q_given is None else 0.0
    infl = ((1.0 - s) * a + dq_db * b - share * ((1.0 - s) * b + dq_db * b)) / den
    se = float(infl.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    cnum, cden = _ratio(s, float(sc.mean()), float(cc.mean()), float(sc.mean()))
    cost = (cnum + explore_rate * (1.0 - s) * float(sc.mean())) / cden if cden > 0 else math.nan
    return Estimate(share, share - _Z90 * se, share + _Z90 * se, cost, n)


class EstimateWindow:
    """Samples and routing decisions of the last `window_s` seconds (the caller passes the clock)."""

    def __init__(self, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._samples: deque[tuple[float, ExploreSample]] = deque()
        self._routed: deque[tuple[float, bool]] = deque()

    def _expire(self, now: float) -> None:
        edge = now - self.window_s
        while self._samples and self._samples[0][0] < edge:
            self._samples.popleft()
        while self._routed and self._routed[0][0] < edge:
            self._routed.popleft()

    def routed(self, strong: bool, now: float) -> None:
        self._routed.append((now, strong))
        self._expire(now)

    def sample(self, sample: ExploreSample, now: float) -> None:
        self._samples.append((now, sample))
        self._expire(now)

    def estimate(
        self, now: float, strong_quality_of_strong_routed: float | None = None, explore_rate: float = 0.0
    ) -> Estimate | None:
        self._expire(now)
        if not self._routed:
            return None
        share = sum(1 for _, strong in self._routed if strong) / len(self._routed)
        return estimate([x for _, x in self._samples], share, strong_quality_of_strong_routed, explore_rate)
