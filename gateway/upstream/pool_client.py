"""The per-pool client, and the replicas' /metrics fetch.

Each pool gets its own timeouts and auth header; the client's Authorization header is never
forwarded. Which replica serves a request is the pool's business (`pools.ReplicaPool`: live load,
prefix affinity, breakers, hold queue); `PoolClient` ties it to the pool's config and computes the
affinity key only for pools that use it. How a replica is reached is its transport's
(gateway.upstream.transport); an `engine: litellm` pool's replicas are `litellm://<pool>/<i>`, one per
configured `api_base`, served in-process (gateway.upstream.hosted).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.config import Pool
from gateway.config_lora import Lora
from gateway.errors import GatewayError, TransportError
from gateway.upstream.h1 import H1Client
from gateway.upstream.transport import HOSTED_SCHEME
from pools.affinity import prefix_key
from pools.discovery import Discovery, StaticDiscovery, discovery_for
from pools.lora import LoraPicking
from pools.pool import ReplicaPool
from pools.runtime import PoolRuntime
from pools.scraper import Fetch, httpx_fetch
from pools.spec_decode import DEFAULT_WINDOW_S


@dataclass(slots=True)
class PoolClient:
    """How to reach one pool: its live replica set, auth, timeouts."""

    config: Pool
    headers: dict[str, str]
    replicas: ReplicaPool
    runtime: PoolRuntime
    affinity_chars: int  # 0 = the pool does not use prefix affinity: skip computing the key

    @classmethod
    def build(
        cls,
        pool: Pool,
        environ: dict[str, str] | os._Environ[str] = os.environ,
        rand: random.Random | None = None,
    ) -> PoolClient:
        headers = {"content-type": "application/json"}
        if pool.api_key_env:
            key = environ.get(pool.api_key_env)
            if not key:
                raise GatewayError(f"pool '{pool.name}': environment variable {pool.api_key_env} is not set")
            if "\r" in key or "\n" in key:  # e.g. a key file read with its trailing newline
                raise GatewayError(
                    f"pool '{pool.name}': environment variable {pool.api_key_env} holds a CR or LF"
                )
            headers["authorization"] = f"Bearer {key}"
        spec = pool.speculative
        lora = pool.lora
        replicas = ReplicaPool(
            pool.name,
            pool.balancing,
            pool.saturation,
            pool.breaker,
            pool.retries,
            pool.admission,
            rand=rand,
            # An undeclared pool whose engine speculates anyway is measured over the default window.
            spec_window_s=spec.acceptance_window_s if spec is not None else DEFAULT_WINDOW_S,
            lora=_picking(lora) if lora is not None else None,
        )
        discovery: Discovery
        if pool.engine == "litellm":
            discovery = StaticDiscovery(hosted_replicas(pool))
        else:
            assert pool.endpoints is not None  # the config requires them
            discovery = discovery_for(pool.endpoints)
        if isinstance(discovery, StaticDiscovery):
            replicas.set_members(discovery.urls)  # usable before discovery starts
        bal = pool.balancing
        return cls(
            config=pool,
            headers=headers,
            replicas=replicas,
            # Only vLLM replicas export the load the picker reads.
            runtime=PoolRuntime(
                replicas,
                discovery,
                scrape=pool.engine == "vllm",
                # Adapters loaded at run time: re-read what each replica serves (restarts, other gateways).
                relist_s=lora.relist_s if lora is not None and lora.runtime_loading else None,
            ),
            affinity_chars=bal.prefix.prefix_chars if bal.strategy == "prefix_affinity" else 0,
        )

    def key(self, body: dict[str, Any]) -> int | None:
        return prefix_key(body, self.affinity_chars) if self.affinity_chars else None

    def start(self, fetch: Fetch) -> None:
        self.runtime.start(fetch)

    async def close(self) -> None:
        await self.runtime.close()


def hosted_replicas(pool: Pool) -> list[str]:
    """An `engine: litellm` pool's replicas: one per configured `api_base` (or one using the
    provider's default), `litellm://<pool>/<i>`; gateway.upstream.hosted maps them back."""
    bases = pool.endpoints.static if pool.endpoints is not None else []
    return [f"{HOSTED_SCHEME}{pool.name}/{i}" for i in range(max(1, len(bases)))]


def _picking(lora: Lora) -> LoraPicking:
    return LoraPicking(
        max_loras=lora.max_loras,
        preloaded=not lora.runtime_loading,
        affinity=lora.affinity,
        load_factor=lora.load_factor,
        adapters=len(lora.adapters),
    )


def metrics_fetch(h1: H1Client | None, control: httpx.AsyncClient) -> Fetch:
    """The replicas' /metrics GET: the lean client for plain-HTTP replicas, httpx for the rest.

    Every replica is scraped every `scrape_interval_s` on the event loop that relays requests; an
    httpx GET costs ~0.8 ms of it, the lean client a fraction, which is what keeps a pool of many
    replicas from showing up in the relay's tail latency."""
    fallback = httpx_fetch(control)
    if h1 is None:
        return fallback

    async def fetch(base: str, path: str, timeout: float) -> str | None:
        if not h1.supports(base):
            return await fallback(base, path, timeout)
        try:
            resp = await h1.get(base, path, connect_s=timeout, total_s=timeout)
            try:
                data = await resp.read()
            finally:
                resp.release()
        except TransportError:
            return None
        return data.decode("utf-8", "replace") if resp.status == 200 else None

    return fetch
