"""Prometheus metrics of the gateway (one registry per app, built in the lifespan).

Names are prefixed `llmgw_`; labels are bounded: `pool` and `model` (the alias, from config),
`endpoint`, `code`. Never a key, user or request id. Labelled children for each configured alias
are resolved once at start-up so the hot path does no label lookups. Buckets fit LLM traffic: TTFT
up to tens of seconds, TPOT in milliseconds, gateway overhead in tens of microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Policy
from pools.pool import ReplicaPool
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
        self.limit_speculation = Counter(
            "llmgw_ratelimit_speculative",
            "Admissions overlapped with the pool call (limits.speculative), by outcome: admitted, or "
            "refused (the pool call was cancelled before anything reached the client)",
            ["outcome"],
            registry=r,
        )
        self.limiter_latency = Histogram(
            "llmgw_ratelimit_backend_seconds",
            "Latency of the limiter's admission call (one Redis round trip with the Redis backend)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )
        self.retries = Counter(
            "llmgw_pool_retries",
            "Retry decisions before the first byte: retried, budget_exhausted, no_other_replica",
            ["pool", "outcome"],
            registry=r,
        )
        self.pool_rejections = Counter(
            "llmgw_pool_rejections",
            "Requests a pool could not place (queue_full, saturated, cold_start): answered 503",
            ["pool", "reason"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "llmgw_pool_queue_wait_seconds",
            "Time held in a pool's admission queue, for requests that had to wait",
            ["pool"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.router_decisions = Counter(
            "llmgw_router_decisions",
            "Requests to routed aliases by the pool (tier) that answered and whether the cascade escalated",
            ["model", "pool", "escalated"],
            registry=r,
        )
        self.router_escalations = Counter(
            "llmgw_router_escalations",
            "Cascade escalations by routed alias and reason (low_confidence, disagreement, ...)",
            ["model", "reason"],
            registry=r,
        )
        self.router_seconds = Histogram(
            "llmgw_router_decision_seconds",
            "Routing decision time per request (difficulty scoring off the event loop + plan)",
            ["model"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1),
            registry=r,
        )
        self.router_fallback = Gauge(
            "llmgw_router_fallback",
            "1 while a routed alias runs its fallback policy because its difficulty model is unavailable",
            ["model"],
            registry=r,
        )
        self.cache_requests = Counter(
            "llmgw_cache_requests",
            "Cacheable-endpoint requests by alias and cache status (hit, semantic-hit, miss, bypass)",
            ["model", "status"],
            registry=r,
        )
        self.cache_lookup_seconds = Histogram(
            "llmgw_cache_lookup_seconds",
            "Cache lookup time (exact: one GET; semantic: embedding + vector query)",
            ["cache"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
            registry=r,
        )
        self.cache_stores = Counter(
            "llmgw_cache_stores",
            "Answers written to the cache, by alias and cache (exact, semantic)",
            ["model", "cache"],
            registry=r,
        )
        self.cache_errors = Counter(
            "llmgw_cache_errors",
            "Cache backend failures by operation (the request goes on uncached)",
            ["op"],
            registry=r,
        )
        self.cache_saved_tokens = Counter(
            "llmgw_cache_saved_tokens",
            "Tokens cache hits answered without a pool (the usage recorded with the cached answer)",
            ["model", "direction"],
            registry=r,
        )
        self.cache_semantic_rejected = Counter(
            "llmgw_cache_semantic_rejected",
            "Nearest semantic entries above the similarity threshold that asked another question "
            "(other numbers, negation, direction, entities): served from the pool instead",
            ["model"],
            registry=r,
        )
        self.cache_semantic_available = Gauge(
            "llmgw_cache_semantic_available",
            "1 when the semantic cache's vector index is usable; 0 when it is disabled (e.g. Redis "
            "without the query engine) although an alias enables it",
            registry=r,
        )
        # Per (alias, pool): a routed alias has one child per tier pool.
        self.by_alias: dict[tuple[str, str], AliasMetrics] = {}
        for m in policy.models:
            for pool in m.route.pools:
                self.by_alias[(m.name, pool)] = AliasMetrics(
                    ttft=self._ttft.labels(m.name, pool),
                    tpot=self._tpot.labels(m.name, pool),
                    input_tokens=self._tokens.labels(m.name, pool, "input"),
                    output_tokens=self._tokens.labels(m.name, pool, "output"),
                    inflight=self._inflight.labels(m.name, pool),
                )
        # Children of the per-request series, memoised on first use: `labels()` costs several times the
        # increment it precedes. Bounded: aliases and pools come from the config, endpoints and statuses
        # are a handful.
        self._finished: dict[tuple[str, str, str, int, bool], tuple[Counter, Histogram]] = {}
        self._overheads: dict[str, Histogram] = {}

    def finished(
        self, model: str, pool: str, endpoint: str, status: int, stream: bool, seconds: float
    ) -> None:
        """One answered request: `llmgw_requests_total` and `llmgw_request_duration_seconds`."""
        key = (model, pool, endpoint, status, stream)
        children = self._finished.get(key)
        if children is None:
            children = self._finished[key] = (
                self.requests.labels(model, pool, endpoint, str(status)),
                self.duration.labels(model, pool, endpoint, "true" if stream else "false"),
            )
        children[0].inc()
        children[1].observe(seconds)

    def overhead_of(self, endpoint: str) -> Histogram:
        child = self._overheads.get(endpoint)
        if child is None:
            child = self._overheads[endpoint] = self.overhead.labels(endpoint)
        return child


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


class PoolsCollector(Collector):
    """Per pool and replica state read at scrape time (the hot path only bumps plain ints).

    Replica labels are base URLs: bounded by the pools' sizes, which operators control.
    """

    def __init__(self, pools: Mapping[str, ReplicaPool]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily(
            "llmgw_pool_queued_requests",
            "Requests held waiting for a replica (scale-from-zero demand for KEDA; present at zero replicas)",
            labels=["pool"],
        )
        replicas = GaugeMetricFamily(
            "llmgw_pool_replicas", "Replicas known to the pool, by breaker state", labels=["pool", "state"]
        )
        picks = CounterMetricFamily("llmgw_pool_picks", "Replica picks by reason", labels=["pool", "reason"])
        held = CounterMetricFamily(
            "llmgw_pool_held_requests", "Requests that waited in the pool's queue", labels=["pool"]
        )
        budget = CounterMetricFamily(
            "llmgw_pool_retry_budget", "Retry budget decisions", labels=["pool", "outcome"]
        )
        inflight = GaugeMetricFamily(
            "llmgw_replica_inflight_requests",
            "This gateway's requests on a replica",
            labels=["pool", "replica"],
        )
        waiting = GaugeMetricFamily(
            "llmgw_replica_waiting_requests", "Scraped vLLM queue of a replica", labels=["pool", "replica"]
        )
        kv = GaugeMetricFamily(
            "llmgw_replica_kv_cache_usage", "Scraped vLLM KV-cache use (0..1)", labels=["pool", "replica"]
        )
        ttft = GaugeMetricFamily(
            "llmgw_replica_ttft_seconds",
            "Recent time to first token of a replica as this gateway saw it (EWMA over ~10 streams)",
            labels=["pool", "replica"],
        )
        breaker = GaugeMetricFamily(
            "llmgw_replica_breaker_state",
            "Circuit breaker of a replica: 0 closed, 1 open, 2 half-open",
            labels=["pool", "replica"],
        )
        opens = CounterMetricFamily(
            "llmgw_replica_breaker_opens", "Times a replica's breaker opened", labels=["pool", "replica"]
        )
        now = time.monotonic()
        for name, pool in self._pools.items():
            queued.add_metric([name], pool.held)
            states = dict.fromkeys(("closed", "open", "half_open"), 0)
            for r in pool.replicas:
                state = r.breaker.current(now)
                states[state.name.lower()] += 1
                inflight.add_metric([name, r.base], r.inflight)
                load = r.fresh_load(now, pool.balancing.stale_after_s)
                if load is not None:
                    waiting.add_metric([name, r.base], load.waiting)
                    kv.add_metric([name, r.base], load.kv_usage)
                if r.ttft_ewma:
                    ttft.add_metric([name, r.base], r.ttft_ewma)
                breaker.add_metric([name, r.base], int(state))
                opens.add_metric([name, r.base], r.breaker.opens)
            for state_name, count in states.items():
                replicas.add_metric([name, state_name], count)
            for reason, count in pool.stats.picks.items():
                picks.add_metric([name, reason], count)
            held.add_metric([name], pool.stats.held)
            budget.add_metric([name, "granted"], pool.budget.granted)
            budget.add_metric([name, "refused"], pool.budget.refused)
        yield from (queued, replicas, picks, held, budget, inflight, waiting, kv, ttft, breaker, opens)
