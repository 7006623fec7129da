"""Replica pools: discovery, a live load snapshot per replica, replica picking, resilience.

`pools` never imports `gateway` (design §2): the gateway builds a `ReplicaPool` from its policy and
drives it from the relay. Decisions (`picker.pick`, `breaker`, `budget`) are pure functions or
small state machines over plain data with an explicit clock; I/O (scraping, discovery) sits behind
small protocols and runs in background tasks.

Re-exported here: the pool policy models (`pools.config`) and `prefix_key` (`pools.affinity`), which
add nothing measurable to `import pools.config` (the gateway's config loading). `Breaker` is not:
the policy model `pools.config.Breaker` and the per-replica state machine `pools.breaker.Breaker`
share the name. The rest stays in its module, because importing it here would load it into every
`import pools.…`:

- the decisions and the replica they decide over, pure but ~6% more instructions on the config path
  (their dataclass and enum definitions): `pools.replica` (Replica, Load), `pools.picker` (pick,
  ROUND_ROBIN, LEAST_LOAD, AFFINITY, AFFINITY_SPILL), `pools.breaker` (Breaker, State),
  `pools.budget` (RetryBudget), `pools.vllm_metrics` (parse_load), `pools.lora` (a replica's LoRA
  adapters and adapter-aware placement: Adapters, LoraPicking, place), `pools.spec_decode` and
  `pools.tpot_curve` (speculative decoding's acceptance and TPOT-vs-batch curves);
- the runtime (asyncio, socket, httpx): `pools.pool` (ReplicaPool, NoCapacity), `pools.discovery`
  (Discovery, StaticDiscovery, DnsDiscovery, discovery_for, url_of), `pools.kube` (ready_urls),
  `pools.scraper` (Scraper, Fetch, httpx_fetch), `pools.runtime` (PoolRuntime);
- the drift comparison shared by `llmgw drift` and the gateway's canary: `pools.drift` (compare,
  summarize, breaches, Step) and its wire shapes `pools.drift_answer` (trajectory, canary_body).
"""

from __future__ import annotations

from pools.affinity import prefix_key
from pools.config import Admission, Balancing, DnsEndpoints, Endpoints, PrefixAffinity, Retries, Saturation

__all__ = [
    "Admission",
    "Balancing",
    "DnsEndpoints",
    "Endpoints",
    "PrefixAffinity",
    "Retries",
    "Saturation",
    "prefix_key",
]
