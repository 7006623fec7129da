"""SLO-aware admission and saturation: pure decisions over a pool's live state (issue 42).

**The TTFT of a held request** is predicted as the hold-queue wait plus the pool's recent TTFT once
dispatched:

    wait = (requests dispatched before it + 1) / drain rate
    TTFT = wait + service TTFT

- *Before it*: every held request of a higher band, plus, in its own band, what fair queuing serves
  first. Under weighted fair queuing (equal weights assumed) each backlogged tenant gets a turn per
  round, so a request that is its tenant's n-th waits for about n turns of every other backlogged
  tenant (each capped by that tenant's backlog); in arrival order (fairness off) it is the whole band.
  A lower band with a minimum share is ignored (it takes at most its share).
- *Drain rate*: requests the pool finished per second over the last few seconds (`DrainRate`). While
  the gateway holds, every replica is busy, so what finishes is what the queue drains by.
- *Service TTFT*: the mean of the replicas' TTFT EWMAs (the gateway's own view: it includes the
  engine's internal queue at the current load).

While a replica is free the prediction is the service TTFT alone. There is none (None, unknown) for
a request that would be held before the pool has finished anything recently (no rate to divide by):
it is queued as before, and a reroute never goes to such a pool. Each prediction is compared with the
TTFT the request then had (`llmgw_pool_ttft_prediction_error_seconds`), so the predictor's error can
be watched.

**Saturation** counts three signals of the replicas' scrapes and this gateway's view: the engines'
waiting queue, KV-cache use and observed TTFT, each against the pool's `saturation` thresholds. A pool
is saturated while the gateway holds requests (no replica would take one) or while at least two of the
three signals say so: one alone is often benign (a KV cache kept full by prefix caching, one slow
prompt, a short burst in the queue).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Action = Literal["queue", "reroute", "shed"]


@dataclass(frozen=True, slots=True)
class SloAsk:
    """What a request's SLO class asks of admission: its TTFT target and what to do when a held
    request is predicted to miss it."""

    ttft_s: float
    action: Action


def ahead_in_queue(
    backlog: Mapping[tuple[int, str], int], band: int, tenant: str, fair: bool, shares: Mapping[int, float]
) -> float:
    """Held requests dispatched before a new one of `tenant` in `band` (module docstring)."""
    ahead = 0.0
    own_band: dict[str, int] = {}
    for (b, t), n in backlog.items():
        if b > band:
            ahead += n
        elif b == band:
            own_band[t] = n
    if not fair:
        return ahead + sum(own_band.values())
    turns = own_band.get(tenant, 0) + 1  # this request is its tenant's `turns`-th
    ahead += turns - 1
    ahead += sum(min(n, turns) for t, n in own_band.items() if t != tenant)
    return ahead


def predict_ttft(ahead: float, drain_per_s: float | None, service_ttft_s: float) -> float | None:
    """A held request's TTFT (seconds): its wait for `ahead` others to be dispatched, then the service
    TTFT; None without a drain rate."""
    if drain_per_s is None or drain_per_s <= 0:
        return None
    return (ahead + 1.0) / drain_per_s + service_ttft_s


def decide(predicted: float | None, slo: SloAsk | None) -> Action:
    """`queue` unless the request is predicted to miss its TTFT target, then its class's action."""
    if slo is None or predicted is None or predicted <= slo.ttft_s:
        return "queue"
    return slo.action


def reroute(current: float | None, others: list[float | None], target_s: float) -> int | None:
    """Of a request's other pools (their predicted TTFT; None: unknown), the one to send it to when its
    own pool is predicted to miss `target_s`: the one predicted soonest among those that meet it (the
    first on a tie). None: stay (it meets its target, its own prediction is unknown, or no other pool
    is known to meet it)."""
    if current is None or current <= target_s:
        return None
    best: tuple[float, int] | None = None
    for i, p in enumerate(others):
        if p is not None and p <= target_s and (best is None or p < best[0]):
            best = (p, i)
    return None if best is None else best[1]


class DrainRate:
    """Requests finished per second, over the last `window_s` (at most `keep` finishes remembered)."""

    __slots__ = ("_times", "_window")

    def __init__(self, window_s: float = 5.0, keep: int = 256) -> None:
        self._times: deque[float] = deque(maxlen=keep)
        self._window = window_s

    def tick(self, now: float) -> None:
        self._times.append(now)

    def rate(self, now: float) -> float | None:
        times = self._times
        while times and now - times[0] > self._window:
            times.popleft()
        if len(times) < 2:
            return None
        # Over at least a second: a batch finishing at once is not a rate.
        return len(times) / max(now - times[0], 1.0)


@dataclass(frozen=True, slots=True)
class Signals:
    """A pool's saturation signals: means over the replicas with a fresh scrape (None without one)."""

    held: int
    waiting: float | None
    kv_usage: float | None
    ttft_s: float | None


def saturation(
    s: Signals, waiting: float, kv_usage: float, ttft_s: float | None
) -> tuple[bool, dict[str, bool]]:
    """(saturated, each signal's verdict) against the thresholds (module docstring); the held queue
    alone is enough."""
    verdicts = {
        "queue": s.waiting is not None and s.waiting >= waiting,
        "kv": s.kv_usage is not None and s.kv_usage >= kv_usage,
        "latency": ttft_s is not None and s.ttft_s is not None and s.ttft_s >= ttft_s,
    }
    return s.held > 0 or sum(verdicts.values()) >= 2, verdicts
