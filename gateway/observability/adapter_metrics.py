"""Metrics of LoRA adapters: per-adapter requests, tokens and TTFT, on-demand loads, placements, and
the adapters each replica holds.

Labels are bounded by the policy: `pool` and `adapter` come from `pools[].lora.adapters` (a request
for an undeclared adapter is refused before it is counted), `replica` from the pool's membership.
Every declared (pool, adapter) has its children from the start, so dashboards and alerts see series
before the first request. The placements and replica gauges are read from the pools at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Policy
from gateway.observability._buckets import TTFT_BUCKETS
from pools.lora import PLACEMENTS
from pools.pool import ReplicaPool

if TYPE_CHECKING:
    from gateway.record import RequestRecord

__all__ = ["LOAD_OUTCOMES", "AdapterCollector", "AdapterMetrics"]

LOAD_OUTCOMES = ("loaded", "already_loaded", "failed", "backoff")  # backoff: refused, a recent load failed


class AdapterMetrics:
    def __init__(self, policy: Policy, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "llmgw_adapter_requests",
            "Requests served by a LoRA adapter, by pool, adapter and HTTP status",
            ["pool", "adapter", "status"],
            registry=registry,
        )
        self.tokens = Counter(
            "llmgw_adapter_tokens",
            "Tokens of a LoRA adapter's requests (input, output)",
            ["pool", "adapter", "direction"],
            registry=registry,
        )
        self.ttft = Histogram(
            "llmgw_adapter_ttft_seconds",
            "Time to first token of a LoRA adapter's streams",
            ["pool", "adapter"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.loads = Counter(
            "llmgw_adapter_loads",
            "On-demand loads of an adapter on a replica (/v1/load_lora_adapter), by outcome (backoff: "
            "refused without a load while a recent failure is remembered)",
            ["pool", "adapter", "outcome"],
            registry=registry,
        )
        for p in policy.pools:
            for a in p.lora.adapters if p.lora is not None else ():
                self.requests.labels(p.name, a.name, "200")
                self.tokens.labels(p.name, a.name, "input")
                self.tokens.labels(p.name, a.name, "output")
                self.ttft.labels(p.name, a.name)
                for outcome in LOAD_OUTCOMES:
                    self.loads.labels(p.name, a.name, outcome)

    def finish(self, req: RequestRecord, pool: str, adapter: str) -> None:
        """One request served by `adapter` on `pool` ended (status on `req.http`; usage and TTFT in
        `req.answer`)."""
        self.requests.labels(pool, adapter, str(req.http.status)).inc()
        answer = req.answer
        if answer is None:
            return
        if answer.usage_in:
            self.tokens.labels(pool, adapter, "input").inc(answer.usage_in)
        if answer.usage_out:
            self.tokens.labels(pool, adapter, "output").inc(answer.usage_out)
        if answer.ttft is not None:
            self.ttft.labels(pool, adapter).observe(answer.ttft)


class AdapterCollector(Collector):
    """At scrape time: how adapter requests were placed, and the adapters of each LoRA replica."""

    def __init__(self, pools: Mapping[str, ReplicaPool]) -> None:
        self._pools = {name: p for name, p in pools.items() if p.lora is not None}

    def collect(self) -> Iterator[Metric]:
        picks = CounterMetricFamily(
            "llmgw_adapter_picks",
            "Replica picks of adapter requests by placement: active (the adapter was in a slot), "
            "free_slot, swap (the engine evicts one), load (the gateway loaded it first), any (every "
            "replica was over the load bound)",
            labels=["pool", "placement"],
        )
        loaded = GaugeMetricFamily(
            "llmgw_replica_adapters_loaded",
            "Adapters a replica serves as this gateway knows (loaded by it, or listed by /v1/models)",
            labels=["pool", "replica"],
        )
        running = GaugeMetricFamily(
            "llmgw_replica_adapters_running",
            "Adapters with running or waiting requests on a replica (its vllm:lora_requests_info)",
            labels=["pool", "replica"],
        )
        now = time.monotonic()
        for name, pool in self._pools.items():
            for placement in PLACEMENTS:
                picks.add_metric([name, placement], pool.stats.placements[placement])
            lora = pool.lora
            assert lora is not None
            for r in pool.replicas:
                state = r.adapters
                if state is None:
                    continue
                load = r.fresh_load(now, pool.balancing.stale_after_s)
                info = load.lora if load is not None else None
                # Without runtime loading every replica starts with all the pool's adapters.
                count = lora.adapters if lora.preloaded else len(state.registered)
                loaded.add_metric([name, r.base], count)
                running.add_metric([name, r.base], len(info.running | info.waiting) if info else 0)
        yield from (picks, loaded, running)
