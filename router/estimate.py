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

__all__ = ["Estimate", "EstimateWindow", "ExploreSample", "Sums", "estimate", "estimate_sums"]

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


@dataclass(slots=True)
class Sums:
    """Running sums of exploration samples: all the estimate needs, in O(1) memory per bucket."""

    n: int = 0
    a: float = 0.0  # cheap quality
    b: float = 0.0  # strong quality
    aa: float = 0.0
    bb: float = 0.0
    ab: float = 0.0
    cc: float = 0.0  # cheap cost
    sc: float = 0.0  # strong cost

    def add(self, x: ExploreSample) -> None:
        a, b = x.cheap_quality, x.strong_quality
        self.n += 1
        self.a += a
        self.b += b
        self.aa += a * a
        self.bb += b * b
        self.ab += a * b
        self.cc += x.cheap_cost
        self.sc += x.strong_cost

    def merge(self, other: Sums, sign: int = 1) -> None:
        """Add (sign=1) or take away (sign=-1) another bucket's sums."""
        self.n += sign * other.n
        self.a += sign * other.a
        self.b += sign * other.b
        self.aa += sign * other.aa
        self.bb += sign * other.bb
        self.ab += sign * other.ab
        self.cc += sign * other.cc
        self.sc += sign * other.sc


def estimate(
    samples: Sequence[ExploreSample],
    routed_strong_share: float,
    strong_quality_of_strong_routed: float | None = None,
    explore_rate: float = 0.0,
) -> Estimate | None:
    """None without samples or when strong-only quality is zero (no share to speak of)."""
    sums = Sums()
    for x in samples:
        sums.add(x)
    return estimate_sums(sums, routed_strong_share, strong_quality_of_strong_routed, explore_rate)


def estimate_sums(
    sums: Sums,
    routed_strong_share: float,
    strong_quality_of_strong_routed: float | None = None,
    explore_rate: float = 0.0,
) -> Estimate | None:
    """`estimate` from running sums. The influence of a sample on the ratio is linear in its two
    qualities, alpha a + beta b, so its variance needs only the sums of a, b, a^2, b^2 and ab."""
    if not 0.0 <= routed_strong_share <= 1.0:
        raise ValueError(f"routed_strong_share must be in [0, 1], got {routed_strong_share}")
    n, s = sums.n, routed_strong_share
    if n <= 0:
        return None
    ma, mb = sums.a / n, sums.b / n
    q_given = strong_quality_of_strong_routed
    q = mb if q_given is None else q_given
    num, den = _ratio(s, q, ma, mb)
    if den <= 0:
        return None
    share = num / den
    # Influence of each sample on the ratio (first-order); with Q = b-bar, Q moves with b too.
    dq_db = s if q_given is None else 0.0
    alpha, beta = 1.0 - s, dq_db - share * ((1.0 - s) + dq_db)
    se = math.inf
    if n > 1:
        var_a = max(0.0, (sums.aa - n * ma * ma) / (n - 1))
        var_b = max(0.0, (sums.bb - n * mb * mb) / (n - 1))
        cov = (sums.ab - n * ma * mb) / (n - 1)
        if var_a == 0.0:
            # Every cheap answer judged alike (a small window): a zero-width interval would claim a
            # certainty the sample does not have. Laplace's pseudo-counts give it a width.
            p = (sums.a + 1.0) / (n + 2.0)
            var_a = p * (1.0 - p)
        var = alpha * alpha * var_a + beta * beta * var_b + 2.0 * alpha * beta * cov
        se = math.sqrt(max(var, 0.0) / n) / den
    msc, mcc = sums.sc / n, sums.cc / n
    cnum, cden = _ratio(s, msc, mcc, msc)
    cost = (cnum + explore_rate * (1.0 - s) * msc) / cden if cden > 0 else math.nan
    return Estimate(share, share - _Z90 * se, share + _Z90 * se, cost, n)


class EstimateWindow:
    """Samples and routing decisions of the last `window_s` seconds (the caller passes the clock), kept
    as per-second buckets of counts and sums with running totals: memory is bounded by the window's
    length in seconds whatever the request rate, and an estimate costs O(1)."""

    def __init__(self, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        # (second, routed, routed strong, sample sums) per second that saw anything.
        self._buckets: deque[tuple[int, list[int], Sums]] = deque()
        self._routed = [0, 0]  # totals over the buckets: routed, routed strong
        self._sums = Sums()

    def _bucket(self, now: float) -> tuple[list[int], Sums]:
        self._expire(now)
        sec = int(math.floor(now))
        if not self._buckets or self._buckets[-1][0] != sec:
            self._buckets.append((sec, [0, 0], Sums()))
        _, routed, sums = self._buckets[-1]
        return routed, sums

    def _expire(self, now: float) -> None:
        edge = now - self.window_s
        buckets = self._buckets
        while buckets and buckets[0][0] + 1 <= edge:
            _, routed, sums = buckets.popleft()
            self._routed[0] -= routed[0]
            self._routed[1] -= routed[1]
            self._sums.merge(sums, -1)

    def routed(self, strong: bool, now: float) -> None:
        routed, _ = self._bucket(now)
        routed[0] += 1
        routed[1] += strong
        self._routed[0] += 1
        self._routed[1] += strong

    def samples(self) -> int:
        """Samples held (as of the last call that passed the clock)."""
        return self._sums.n

    def sample(self, sample: ExploreSample, now: float) -> None:
        _, sums = self._bucket(now)
        sums.add(sample)
        self._sums.add(sample)

    def estimate(
        self, now: float, strong_quality_of_strong_routed: float | None = None, explore_rate: float = 0.0
    ) -> Estimate | None:
        self._expire(now)
        if self._routed[0] <= 0:
            return None
        share = self._routed[1] / self._routed[0]
        return estimate_sums(self._sums, share, strong_quality_of_strong_routed, explore_rate)
