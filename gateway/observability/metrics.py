"""Prometheus metrics of the gateway (one registry per app, built in the lifespan).

Names are prefixed `llmgw_`; labels are bounded: `pool` and `model` (the alias, from config),
`endpoint`, `code`. Never a key, user or request id. Labelled children for each configured alias
are resolved once at start-up so the hot path does no label lookups. Buckets fit LLM traffic: TTFT
up to tens of seconds, TPOT in milliseconds, gateway overhead in tens of microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from gateway.config import Policy
from gateway.observability._buckets import E2E_BUCKETS, OVERHEAD_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from gateway.observability._learning_metrics import LearningMetrics
from gateway.observability.adapter_metrics import AdapterMetrics
from gateway.observability.collectors import FailoverCollector, PoolsCollector
from gateway.observability.drift_metrics import DriftGauges
from gateway.observability.lean import (
    Counter,
    CounterChild,
    Gauge,
    GaugeChild,
    Histogram,
    HistogramChild,
)

# The scrape-time collectors live in gateway.observability.collectors; importers may use either module.
__all__ = [
    "E2E_BUCKETS",
    "OVERHEAD_BUCKETS",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
    "AliasMetrics",
    "FailoverCollector",
    "Metrics",
    "PoolsCollector",
]


@dataclass(frozen=True, slots=True)
class AliasMetrics:
    """Pre-labelled children for one alias on its pool."""

    ttft: HistogramChild
    tpot: HistogramChild
    input_tokens: CounterChild
    output_tokens: CounterChild
    inflight: GaugeChild


class Metrics(LearningMetrics):
    def __init__(self, policy: Policy) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Declared in this order (the order /metrics lists them in): relay, admission, pools, router, cache.
        self._declare_relay(self.registry)
        self._declare_auth(self.registry)
        self._declare_admission(self.registry)
        self._declare_pools(self.registry)
        self._declare_router(self.registry)
        self._declare_learning(self.registry)
        self._declare_sharing(self.registry)
        self._declare_cache(self.registry)
        self._declare_guardrails(self.registry)
        self.drift = DriftGauges(self.registry)  # the drift canary's (gateway.upstream.drift_canary)
        self.adapters = AdapterMetrics(policy, self.registry)  # LoRA adapters (pools[].lora)
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
        self._finished: dict[tuple[str, str, str, int, bool], tuple[CounterChild, HistogramChild]] = {}
        self._overheads: dict[str, HistogramChild] = {}

    def _declare_relay(self, r: CollectorRegistry) -> None:
        """Every answered request: counts, durations, tokens, failures, the gateway's own time."""
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

    def _declare_auth(self, r: CollectorRegistry) -> None:
        """Authentication and the key store."""
        self.auth_failures = Counter(
            "llmgw_auth_failures",
            "Requests refused by authentication (401/403), by code",
            ["code"],
            registry=r,
        )
        self.auth_stale_keys = Counter(
            "llmgw_auth_stale_keys",
            "Requests authenticated from the stale key cache while the key store was unavailable",
            registry=r,
        )
        self.key_store_degraded = Gauge(
            "llmgw_auth_key_store_degraded",
            "1 while the key store is unavailable and known keys are served from the stale cache",
            registry=r,
        )
        self.key_invalidations = Counter(
            "llmgw_auth_key_invalidations",
            "Key cache entries dropped on revocation, by source (local: this process revoked it; "
            "broadcast: another replica did)",
            ["source"],
            registry=r,
        )

    def _declare_admission(self, r: CollectorRegistry) -> None:
        """The token-budget limiter."""
        self.limit_decisions = Counter(
            "llmgw_ratelimit_decisions",
            "Limiter outcomes (allowed, degraded = fail-open, refused, shadow_refused) by level, dimension",
            ["level", "dimension", "outcome"],
            registry=r,
        )
        self.budget_used = Gauge(
            "llmgw_budget_used_ratio",
            "Share of an org's dollar budget used in its current window (reservations included), as its "
            "last admission saw it, by org and budget (usd_per_day, usd_per_month, usd_total)",
            ["org", "budget"],
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
        self.usage_missing = Counter(
            "llmgw_ratelimit_usage_missing",
            "Answers a pool sent without usage: the request is charged its reservation",
            ["pool"],
            registry=r,
        )
        self.usage_invalid = Counter(
            "llmgw_ratelimit_usage_invalid",
            "Usage a pool reported that is not a sane token count (negative, not an integer, absurd): "
            "clamped to the reservation, by reason",
            ["pool", "reason"],
            registry=r,
        )
        self.limiter_latency = Histogram(
            "llmgw_ratelimit_backend_seconds",
            "Latency of the limiter's admission call (one Redis round trip with the Redis backend)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )

    def _declare_pools(self, r: CollectorRegistry) -> None:
        """Retries and placement in the pools (their replica state is PoolsCollector's, at scrape time)."""
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
            "Time held in a pool's admission queue, for requests that had to wait, by priority band and "
            "org (at most 100 orgs per pool, the rest as _other)",
            ["pool", "band", "org"],
            buckets=E2E_BUCKETS,
            registry=r,
        )
        self.ttft_prediction_error = Histogram(
            "llmgw_pool_ttft_prediction_error_seconds",
            "A held streamed request's TTFT minus the TTFT admission predicted for it (pools.slo): "
            "positive = later than predicted",
            ["pool"],
            buckets=(-30, -10, -5, -2, -1, -0.5, -0.25, -0.1, 0, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )

    def _declare_router(self, r: CollectorRegistry) -> None:
        """Routed aliases: decisions, cascade escalations, decision time, fallback."""
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
        self.router_strong_share = Gauge(
            "llmgw_router_strong_share",
            "Share of a routed alias's recent requests started at the strong tier under the live cut "
            "(target_strong_share with live calibration; NaN until the live cut is in use)",
            ["model"],
            registry=r,
        )
        self.router_cost_share = Gauge(
            "llmgw_router_cost_share",
            "A cascade's realized cost as a share of strong-only cost since the replica started "
            "(routed aliases with cascade.cost_budget)",
            ["model"],
            registry=r,
        )
        self.router_escalation_rate = Gauge(
            "llmgw_router_escalation_rate",
            "Share of a cascade's recent requests that escalated (near 1: the scorer rejects nearly "
            "every cheap answer; routed aliases with cascade.cost_budget; NaN before 100 requests)",
            ["model"],
            registry=r,
        )
        self.router_live_cut = Gauge(
            "llmgw_router_live_cut",
            "The difficulty cut a routed alias's live calibration uses now (NaN: the artifact's cut); "
            "for a `success` policy the learnt tolerance (NaN: the configured one)",
            ["model"],
            registry=r,
        )

    def _declare_guardrails(self, r: CollectorRegistry) -> None:
        """Input guardrails and output conformance (gateway/guardrails/)."""
        self.guardrail_events = Counter(
            "llmgw_guardrail_events",
            "Guardrail events by guardrail (secrets, pii, injection, hidden_unicode, exfiltration, "
            "prompt_size, tools, json_schema) and action (logged, redacted, blocked; json_schema: passed, "
            "retried, failed)",
            ["guardrail", "action"],
            registry=r,
        )
        # Zero children, so the dashboard panel and rate() read 0 rather than "no data" before the first
        # event (bounded: these pairs are all there is).
        for guardrail in ("secrets", "pii", "injection", "hidden_unicode", "exfiltration"):
            for action in ("logged", "redacted", "blocked"):
                self.guardrail_events.labels(guardrail, action)
        for guardrail, action in (("prompt_size", "blocked"), ("tools", "blocked")):
            self.guardrail_events.labels(guardrail, action)
        for action in ("passed", "retried", "failed"):
            self.guardrail_events.labels("json_schema", action)

    def _declare_cache(self, r: CollectorRegistry) -> None:
        """The response cache, exact and semantic."""
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

    def overhead_of(self, endpoint: str) -> HistogramChild:
        child = self._overheads.get(endpoint)
        if child is None:
            child = self._overheads[endpoint] = self.overhead.labels(endpoint)
        return child
