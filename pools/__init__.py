"""Replica pools: discovery, a live load snapshot per replica, replica picking, resilience.

`pools` never imports `gateway` (design §2): the gateway builds a `ReplicaPool` from its policy and
drives it from the relay. Decisions (`picker.pick`, `breaker`, `budget`) are pure functions or
small state machines over plain data with an explicit clock; I/O (scraping, discovery) sits behind
small protocols and runs in background tasks.

Re-exported here: the pool policy models (`pools.config`), the replica and its load
(`pools.replica`), the decisions (`pools.picker`, `pools.breaker`, `pools.budget`, `pools.affinity`)
and the vLLM metrics parser: they load no module that `import pools.config` (the gateway's config
loading) does not load already; their own definitions cost ~7 ms. `Breaker` here is the per-replica
state machine (`pools.breaker`); its policy model is `pools.config.Breaker`. These stay in their
modules, because importing them here would load asyncio, socket or httpx into every `import pools.…`:
`pools.pool` (ReplicaPool, NoCapacity), `pools.discovery` (Discovery, StaticDiscovery, DnsDiscovery,
discovery_for, url_of), `pools.kube` (ready_urls), `pools.scraper` (Scraper, Fetch, httpx_fetch),
`pools.runtime` (PoolRuntime).
"""

from __future__ import annotations

from pools.affinity import prefix_key
from pools.breaker import Breaker, State
from pools.budget import RetryBudget
from pools.config import Admission, Balancing, DnsEndpoints, Endpoints, PrefixAffinity, Retries, Saturation
from pools.picker import AFFINITY, AFFINITY_SPILL, LEAST_LOAD, ROUND_ROBIN, pick
from pools.replica import Load, Replica
from pools.vllm_metrics import parse_load

__all__ = [
    "AFFINITY",
    "AFFINITY_SPILL",
    "LEAST_LOAD",
    "ROUND_ROBIN",
    "Admission",
    "Balancing",
    "Breaker",
    "DnsEndpoints",
    "Endpoints",
    "Load",
    "PrefixAffinity",
    "Replica",
    "Retries",
    "RetryBudget",
    "Saturation",
    "State",
    "parse_load",
    "pick",
    "prefix_key",
]
