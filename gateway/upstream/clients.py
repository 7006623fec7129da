"""The process's upstream clients, built in the app lifespan and closed on shutdown: the pools (with
their discovery and scraping), the shared aiohttp session, the lean HTTP/1.1 client, the control-plane
httpx client, and the LiteLLM bridge for hosted pools."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
import httpx

from gateway.config import Policy
from gateway.observability.adapter_metrics import AdapterCollector
from gateway.observability.metrics import Metrics, PoolsCollector
from gateway.observability.spec_decode import SpecDecodeCollector
from gateway.settings import Settings
from gateway.upstream.h1 import H1Client
from gateway.upstream.hosted import HostedBridge
from gateway.upstream.pool_client import PoolClient, metrics_fetch, new_session


@dataclass(slots=True)
class UpstreamClients:
    pools: dict[str, PoolClient]
    session: aiohttp.ClientSession
    h1: H1Client | None
    control: httpx.AsyncClient  # scraping TLS replicas, discovery (control plane)
    bridge: HostedBridge | None

    @classmethod
    async def start(cls, policy: Policy, settings: Settings, metrics: Metrics) -> UpstreamClients:
        hosted = [p for p in policy.pools if p.engine == "litellm"]
        bridge = HostedBridge(hosted) if hosted else None
        if bridge is not None:
            await bridge.start()
        pools = {p.name: PoolClient.build(p, hosted_base=bridge.base if bridge else "") for p in policy.pools}
        session = new_session(settings.upstream_pool_size)
        h1 = H1Client() if settings.upstream_client == "h1" else None
        control = httpx.AsyncClient(timeout=5.0)
        fetch = metrics_fetch(h1, control)
        for name, pool in pools.items():
            pool.replicas.on_wait = metrics.queue_wait.labels(name).observe
            pool.start(fetch)
        replica_pools = {n: p.replicas for n, p in pools.items()}
        metrics.registry.register(PoolsCollector(replica_pools))
        metrics.registry.register(SpecDecodeCollector(replica_pools))
        metrics.registry.register(AdapterCollector(replica_pools))
        return cls(pools, session, h1, control, bridge)

    async def close(self) -> None:
        for pool in self.pools.values():
            await pool.close()
        await self.control.aclose()
        if self.bridge is not None:
            await self.bridge.close()
        await self.session.close()
        if self.h1 is not None:
            self.h1.close()
