"""The process's upstream clients, built in the app lifespan and closed on shutdown: the pools (with
their discovery and scraping), the transports that reach their replicas (the lean HTTP/1.1 client,
the shared aiohttp session, LiteLLM in-process for hosted pools), and the control-plane httpx
client."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import httpx

from gateway.config import Policy
from gateway.observability.adapter_metrics import AdapterCollector
from gateway.observability.metrics import Metrics, PoolsCollector
from gateway.observability.spec_decode import SpecDecodeCollector
from gateway.settings import Settings
from gateway.upstream.aio import AiohttpTransport, new_session
from gateway.upstream.h1 import H1Client
from gateway.upstream.hosted import LiteLLMTransport
from gateway.upstream.pool_client import PoolClient, metrics_fetch
from gateway.upstream.transport import Transport, Transports
from pools.fair import band_name
from pools.pool import MAX_ORGS, OTHER_ORG


@dataclass(slots=True)
class UpstreamClients:
    pools: dict[str, PoolClient]
    transports: Transports
    session: aiohttp.ClientSession
    h1: H1Client | None
    control: httpx.AsyncClient  # scraping TLS replicas, discovery (control plane)

    @classmethod
    async def start(
        cls, policy: Policy, settings: Settings, metrics: Metrics, transport: Transport | None = None
    ) -> UpstreamClients:
        """`transport`: one transport for every replica instead of the clients' (tests: a
        MockTransport, as httpx.AsyncClient(transport=...) takes one)."""
        hosted = [p for p in policy.pools if p.engine == "litellm"]
        pools = {p.name: PoolClient.build(p) for p in policy.pools}
        session = new_session(settings.upstream_pool_size)
        h1 = H1Client() if settings.upstream_client == "h1" and transport is None else None
        tls = AiohttpTransport(session)
        if transport is not None:
            transports = Transports(transport)
        else:
            hosted_transport = LiteLLMTransport(hosted) if hosted else None
            transports = Transports(h1 if h1 is not None else tls, tls, hosted_transport)
        control = httpx.AsyncClient(timeout=5.0)
        fetch = metrics_fetch(h1, control)
        for name, pool in pools.items():
            pool.replicas.on_wait = _wait_observer(metrics, name)
            pool.replicas.on_prediction = _prediction_observer(metrics, name)
            pool.start(fetch)
        replica_pools = {n: p.replicas for n, p in pools.items()}
        metrics.registry.register(PoolsCollector(replica_pools))
        metrics.registry.register(SpecDecodeCollector(replica_pools))
        metrics.registry.register(AdapterCollector(replica_pools))
        return cls(pools, transports, session, h1, control)

    async def close(self) -> None:
        for pool in self.pools.values():
            await pool.close()
        await self.control.aclose()
        await self.session.close()
        if self.h1 is not None:
            self.h1.close()


def _wait_observer(metrics: Metrics, pool: str) -> Callable[[float, int, str], None]:
    """The pool's `on_wait`: the queue-wait histogram of the request's band and org (children made
    once; at most MAX_ORGS orgs, the rest as OTHER_ORG)."""
    children: dict[tuple[int, str], Callable[[float], None]] = {}

    def observe(seconds: float, band: int, org: str) -> None:
        key = (band, org)
        child = children.get(key)
        if child is None:
            if len(children) >= MAX_ORGS:
                key = (band, OTHER_ORG)
            child = children.get(key)
            if child is None:
                child = children[key] = metrics.queue_wait.labels(pool, band_name(band), key[1]).observe
        child(seconds)

    return observe


def _prediction_observer(metrics: Metrics, pool: str) -> Callable[[float, float], None]:
    """The pool's `on_prediction`: actual minus predicted TTFT."""
    observe = metrics.ttft_prediction_error.labels(pool).observe

    def seen(predicted: float, actual: float) -> None:
        observe(actual - predicted)

    return seen
