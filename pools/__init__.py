"""Replica pools: discovery, a live load snapshot per replica, replica picking, resilience.

`pools` never imports `gateway` (design §2): the gateway builds a `ReplicaPool` from its policy and
drives it from the relay. Decisions (`picker.pick`, `breaker`, `budget`) are pure functions or
small state machines over plain data with an explicit clock; I/O (scraping, discovery) sits behind
small protocols and runs in background tasks.

Names are imported from their modules (no package facade, docs/design/018-layout.md), so that an
`import pools.config` (the gateway's config loading: the pool policy models; `prefix_key` is in
`pools.affinity`) loads only what it names. The policy model `pools.config.Breaker` and the
per-replica state machine `pools.breaker.Breaker` share a name. The rest of the public API:

- the decisions and the replica they decide over, pure but ~6% more instructions on the config path
  (their dataclass and enum definitions): `pools.replica` (Replica, Load), `pools.picker` (pick,
  ROUND_ROBIN, LEAST_LOAD, AFFINITY, AFFINITY_SPILL), `pools.breaker` (Breaker, State),
  `pools.budget` (RetryBudget), `pools.vllm_metrics` (parse_load), `pools.lora` (a replica's LoRA
  adapters and adapter-aware placement: Adapters, LoraPicking, place), `pools.spec_decode` and
  `pools.tpot_curve` (speculative decoding's acceptance and TPOT-vs-batch curves), `pools.fair` (the
  hold queue's order: FairQueue, Flow, tenant_of);
- the runtime (asyncio, socket, httpx): `pools.pool` (ReplicaPool, NoCapacity), `pools.discovery`
  (Discovery, StaticDiscovery, DnsDiscovery, discovery_for, url_of), `pools.kube` (ready_urls),
  `pools.scraper` (Scraper, Fetch, httpx_fetch), `pools.runtime` (PoolRuntime);
- the drift comparison shared by `llmgw drift` and the gateway's canary: `pools.drift` (compare,
  summarize, breaches, Step) and its wire shapes `pools.drift_answer` (trajectory, canary_body).
"""
