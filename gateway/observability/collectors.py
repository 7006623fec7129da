"""Collectors read at scrape time: the limiter's fail-over bookkeeping and the pools' replica state.

The hot path only bumps plain ints on those objects; these turn them into metric families when
Prometheus scrapes, so no per-request label lookups. `gateway.observability.metrics` re-exports both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pools.fair import band_name
from pools.pool import ReplicaPool
from ratelimit.errors import OPS, REASONS
from ratelimit.failover import FailoverStats


class FailoverCollector(Collector):
    """Exports the limiter's fail-open / fail-closed bookkeeping at scrape time."""

    def __init__(self, stats: FailoverStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        errors = CounterMetricFamily(
            "llmgw_ratelimit_backend_errors",
            "Limiter calls to Redis that failed, by operation and reason (timeout, connection, oom, "
            "auth, noperm, moved, readonly, busy, script, other)",
            labels=["op", "reason"],
        )
        # Every (op, reason) from 0, so alerts and dashboards see series before the first error.
        counts = {(op, reason): 0 for op in OPS for reason in REASONS} | s.errors
        for (op, reason), count in sorted(counts.items()):
            errors.add_metric([op, reason], count)
        yield errors
        for name, doc, value in (
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

    Replica labels are base URLs: bounded by the pools' sizes, which operators control. Org labels of
    the dispatched tokens are capped by the pool (`pools.pool.MAX_ORGS`); tenant labels of the share
    gauges are the backlogged tenants only, at most `MAX_TENANTS` per pool (the longest backlogs).
    """

    def __init__(self, pools: Mapping[str, ReplicaPool]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        queued, replicas, picks, held, budget = _pool_families()
        inflight, waiting, kv, ttft, breaker, opens = _replica_families()
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
        yield from _fair_families(self._pools)


MAX_TENANTS = 20


def _fair_families(pools: Mapping[str, ReplicaPool]) -> Iterator[Metric]:
    """The hold queue's fairness (issue 42): tokens dispatched by band and org, and per backlogged
    tenant its share of its band's tokens this busy period next to the share its weight entitles it
    to (a tenant persistently below its due is starved: the alert's signal); SLO refusals by band and
    org; the pool's saturation verdict and its signals."""
    tokens = CounterMetricFamily(
        "llmgw_pool_dispatched_tokens",
        "Tokens of requests dispatched from the hold queue (input estimate, settled to real usage)",
        labels=["pool", "band", "org"],
    )
    share = GaugeMetricFamily(
        "llmgw_pool_tenant_share",
        "A backlogged tenant's share of its band's tokens in the current busy period",
        labels=["pool", "band", "tenant"],
    )
    due = GaugeMetricFamily(
        "llmgw_pool_tenant_due_share",
        "The share a backlogged tenant's weight entitles it to among its band's backlogged tenants",
        labels=["pool", "band", "tenant"],
    )
    refused = CounterMetricFamily(
        "llmgw_pool_slo_refusals",
        "Requests a saturated pool would have held past their SLO's TTFT (pools.slo), by what became of "
        "them: shed (503 slo_unattainable) or rerouted (to another pool of the alias)",
        labels=["pool", "band", "org", "action"],
    )
    saturated = GaugeMetricFamily(
        "llmgw_pool_saturated",
        "1 while the pool counts as saturated: it holds requests, or two of its signals agree",
        labels=["pool"],
    )
    signal = GaugeMetricFamily(
        "llmgw_pool_saturation_signal",
        "Each saturation signal's verdict (queue: engines' waiting queue; kv: KV-cache use; latency: TTFT)",
        labels=["pool", "signal"],
    )
    now = time.monotonic()
    for name, pool in pools.items():
        for (band, org), n in pool.stats.fair_tokens.items():
            tokens.add_metric([name, band_name(band), org], max(n, 0.0))
        for (band, org, action), count in pool.stats.slo_refused.items():
            refused.add_metric([name, band_name(band), org, action], count)
        is_saturated, verdicts = pool.saturated(now)
        saturated.add_metric([name], int(is_saturated))
        for sig, verdict in verdicts.items():
            signal.add_metric([name, sig], int(verdict))
        backlog = pool.backlog()
        shown = sorted(backlog, key=lambda k: -backlog[k])[:MAX_TENANTS]
        shares = pool.shares()
        for key in shown:
            got, entitled = shares[key]
            labels = [name, band_name(key[0]), key[1]]
            share.add_metric(labels, got)
            due.add_metric(labels, entitled)
    yield from (tokens, share, due, refused, saturated, signal)


def _pool_families() -> tuple[
    GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily, CounterMetricFamily
]:
    """Per pool: queued, replicas by breaker state, picks, held, retry budget (fresh each scrape)."""
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
    return queued, replicas, picks, held, budget


def _replica_families() -> tuple[
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    CounterMetricFamily,
]:
    """Per replica: inflight, waiting, KV-cache use, TTFT, breaker state, breaker opens."""
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
    return inflight, waiting, kv, ttft, breaker, opens
