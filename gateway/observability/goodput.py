"""Goodput: did a request meet every target of its alias's SLO class?

A model names an `slo_class` (policy `slo_classes: {name: {ttft_ms, tpot_ms, e2e_ms}}`). Each
request to it is judged once, when it ends:

- a stream (relayed token by token) meets its class when its time to first token is within
  `ttft_ms`, its mean time per output token after the first within `tpot_ms`, and its end-to-end time
  within `e2e_ms` (each only when the class sets it). A stream answered in one piece (a cascade's
  replayed answer) has its first token at the end, so its TTFT is its end-to-end time. A stream the
  pool broke off (no `[DONE]`) misses.
- a non-streamed answer has no first token the client can see: it is judged on `e2e_ms`, or, when
  the class sets none, on the time a stream meeting both targets would have needed,
  `ttft_ms + tpot_ms * (output tokens - 1)`; a class with neither `e2e_ms` nor `ttft_ms` does not
  judge non-streamed requests.
- 5xx answers (the pool failed, was saturated, timed out) miss: the user got no answer in time.
- client errors (4xx: bad request, auth, 429 budgets) and requests whose client left (499) are not
  judged: they say nothing about how fast the service answers.

Counted in `llmgw_slo_requests_total{model,pool,slo_class,outcome=met|missed}`; goodput is the
`met` rate and the goodput share `met / (met + missed)`. Labels are the alias and pool (bounded by
the policy), not the tenant: children are resolved at start-up, the hot path only increments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from gateway.config import Policy, SloClass
from gateway.observability.lean import Counter, CounterChild

if TYPE_CHECKING:
    from gateway.edge.exchange import Exchange
    from gateway.record import Answer


@dataclass(frozen=True, slots=True)
class SloTargets:
    """An SLO class in seconds (None = not part of the class)."""

    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None

    @classmethod
    def of(cls, c: SloClass) -> SloTargets:
        def s(ms: float | None) -> float | None:
            return ms / 1000.0 if ms is not None else None

        return cls(s(c.ttft_ms), s(c.tpot_ms), s(c.e2e_ms))


def judge(
    t: SloTargets,
    streamed: bool,
    ttft: float | None,
    tpot: float | None,
    e2e: float,
    output_tokens: int,
) -> bool | None:
    """True = met, False = missed, None = this class cannot judge this request (pure)."""
    if t.e2e_s is not None and e2e > t.e2e_s:
        return False
    if streamed:
        first = ttft if ttft is not None else e2e
        if t.ttft_s is not None and first > t.ttft_s:
            return False
        # TPOT exists only for streams with at least two tokens relayed one by one.
        return not (t.tpot_s is not None and tpot is not None and tpot > t.tpot_s)
    if t.e2e_s is not None:
        return True
    if t.ttft_s is None:
        return None
    return e2e <= t.ttft_s + (t.tpot_s or 0.0) * max(output_tokens - 1, 0)


@dataclass(frozen=True, slots=True)
class SloChildren:
    """One alias on one pool: its targets and its two pre-labelled counters."""

    targets: SloTargets
    met: CounterChild
    missed: CounterChild

    def record(self, x: Exchange, answer: Answer | None) -> bool | None:
        """Judge one finished request (its exchange and answer) and count it; returns the verdict (None
        = not judged)."""
        status = x.status
        if status >= 500:
            verdict: bool | None = False
        elif status != 200:
            return None
        elif answer is None:  # a 200 without a pool's answer (count_tokens): nothing to time
            verdict = judge(self.targets, x.stream, None, None, x.e2e, 0)
        elif answer.broken:
            verdict = False
        else:
            verdict = judge(self.targets, x.stream, answer.ttft, answer.tpot, x.e2e, answer.usage_out)
        if verdict is True:
            self.met.inc()
        elif verdict is False:
            self.missed.inc()
        return verdict


class SloMetrics:
    def __init__(self, policy: Policy, registry: CollectorRegistry) -> None:
        counter = Counter(
            "llmgw_slo_requests",
            "Requests judged against their alias's SLO class (goodput = outcome met), by alias and pool",
            ["model", "pool", "slo_class", "outcome"],
            registry=registry,
        )
        # Per (alias, pool); aliases without a class are absent (their requests are not judged).
        self.by_alias: dict[tuple[str, str], SloChildren] = {}
        for m in policy.models:
            if m.slo_class is None:
                continue
            targets = SloTargets.of(policy.slo_classes[m.slo_class])
            for pool in m.route.pools:
                self.by_alias[(m.name, pool)] = SloChildren(
                    targets,
                    counter.labels(m.name, pool, m.slo_class, "met"),
                    counter.labels(m.name, pool, m.slo_class, "missed"),
                )
