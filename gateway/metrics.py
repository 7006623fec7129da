"""Prometheus metrics of the gateway (one registry per app, built in the lifespan).

Names are prefixed `llmgw_`; labels are bounded: `pool` and `model` (the alias, from config),
`endpoint`, `code`. Never a key, user or request id. Labelled children for each configured alias
are resolved once at start-up so the hot path does no label lookups. Buckets fit LLM traffic: TTFT
up to tens of seconds, TPOT in milliseconds, gateway overhead in tens of microseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Policy
from ratelimit.failover import FailoverStats

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 40, 80)
TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1)
E2E_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.05)


@dataclass(frozen=True, slots=True)
class AliasMetrics:
    """Pre-labelled children for one alias on its pool."""

    ttft: Histogram
    tpot: Histogram
    input_tokens: Counter
    output_tokens: Counter
    inflight: Gauge


class Metrics:
    def __init__(self, policy: Policy) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "llmgw_requests",
            "Requests answered, by alias, pool, endpoint and HTTP status",
            ["model", "pool", "endpoint", "code"],
            registry=r,
        )
        self.duration = Histogram(
            "llmgw_request_duration_seconds",
            "Arrival to last byte sent, by alias, pool, endpoint and streaming",
            ["model", "pool", "endpoint", "stream"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self._ttft = Histogram(
            "llmgw_time_to_first_token_seconds",
            "Arrival to the first streamed token event sent to the client",
            ["model", "pool"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self._tpot = Histogram(
            "llmgw_time_per_output_token_seconds",
            "Mean time per output token after the first, per streamed request",
            ["model", "pool"],
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self._tokens = Counter(
            "llmgw_tokens", "Tokens reported by the pools", ["model", "pool", "direction"], registry=r
        )
        self._inflight = Gauge(
            "llmgw_inflight_requests", "Requests being relayed now", ["model", "pool"], registry=r
        )
        self.upstream_errors = Counter(
            "llmgw_upstream_errors",
            "Failed pool calls by kind (connect, timeout, status_5xx, malformed, disconnect, ...)",
            ["pool", "kind"],
            registry=r,
        )
        self.client_disconnects = Counter(
            "llmgw_client_disconnects",
            "Requests whose client went away before the answer was complete (upstream cancelled)",
            ["model", "pool"],
            registry=r,
        )
        self.overhead = Histogram(
            "llmgw_gateway_overhead_seconds",
            "Time spent inside the gateway itself (excludes waiting on the pool and on the client)",
            ["endpoint"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.auth_failures = Counter(
            "llmgw_auth_failures",
            "Requests refused by authentication (401/403), by code",
            ["code"],
            registry=r,
        )
        self.limit_decisions = Counter(
            "llmgw_ratelimit_decisions",
            "Limiter outcomes (allowed, degraded = fail-open, refused, shadow_refused) by level, dimension",
            ["level", "dimension", "outcome"],
            registry=r,
        )
        self.limit_tokens = Counter(
            "llmgw_ratelimit_tokens",
            "Tokens reserved at admission / top-up and settled to real usage",
            ["phase"],
            registry=r,
        )
        self.limiter_latency = Histogram(
            "llmgw_ratelimit_backend_seconds",
            "Latency of the limiter's admission call (one Redis round trip with the Redis backend)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )
        self.by_alias: dict[str, AliasMetrics] = {}
        for m in policy.models:
            pool = m.route.pool
            self.by_alias[m.name] = AliasMetrics(
                ttft=self._ttft.labels(m.name, pool),
                tpot=self._tpot.labels(m.name, pool),
                input_tokens=self._tokens.labels(m.name, pool, "input"),
                output_tokens=self._tokens.labels(m.name, pool, "output"),
                inflight=self._inflight.labels(m.name, pool),
            )


class FailoverCollector(Collector):
    """Exports the limiter's fail-open / fail-closed bookkeeping at scrape time."""

    def __init__(self, stats: FailoverStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        for name, doc, value in (
            (
                "llmgw_ratelimit_backend_errors",
                "Limiter calls that found Redis unavailable",
                s.backend_errors,
            ),
            (
                "llmgw_ratelimit_fail_open_activations",
                "Switches to the local fail-open limiter",
                s.fail_open_activations,
            ),
            (
                "llmgw_ratelimit_degraded_decisions",
                "Admissions decided by the local limiter",
                s.degraded_decisions,
            ),
            ("llmgw_ratelimit_recoveries", "Returns to exact (Redis) limiting", s.recoveries),
            ("llmgw_ratelimit_settle_retries", "Background retries of settlements", s.settle_retries),
            (
                "llmgw_ratelimit_settle_drops",
                "Settlements given up (their lease expires instead)",
                s.settle_drops,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        yield GaugeMetricFamily(
            "llmgw_ratelimit_degraded",
            "1 while Redis is unavailable (fail-open local or fail-closed)",
            value=s.degraded,
        )
