"""The shared upstream HTTP client, the per-pool client, and the mapping of failures to errors.

One `aiohttp.ClientSession` per process, built in the app lifespan and closed on shutdown. aiohttp
was chosen by measurement (design §5): on one pinned core a bare relay did 9,028 req/s through
aiohttp and 743 req/s through httpx. Each pool gets its own timeouts and auth header; the client's
Authorization header is never forwarded. Which replica serves a request is the pool's business
(`pools.ReplicaPool`: live load, prefix affinity, breakers, hold queue); `PoolClient` ties it to
the pool's config and computes the affinity key only for pools that use it.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx

from gateway.config import Pool
from gateway.config_lora import Lora
from gateway.errors import GatewayError
from gateway.upstream._h1_response import H1Error
from gateway.upstream.h1 import IDLE_S, H1Client
from gateway.upstream.hosted import replica_paths
from pools.affinity import prefix_key
from pools.discovery import Discovery, StaticDiscovery, discovery_for
from pools.lora import LoraPicking
from pools.pool import ReplicaPool
from pools.runtime import PoolRuntime
from pools.scraper import Fetch, httpx_fetch
from pools.spec_decode import DEFAULT_WINDOW_S


def new_session(pool_size: int, keepalive_s: float = IDLE_S) -> aiohttp.ClientSession:
    """aiohttp for TLS replicas. It never decompresses (the relay forwards the pool's bytes), so it
    asks for identity: an absent accept-encoding would allow any coding (RFC 9110 §12.5.3). Idle
    connections go after `keepalive_s`, before uvicorn's 5 s keep-alive closes them under a request."""
    connector = aiohttp.TCPConnector(
        limit=pool_size,
        limit_per_host=0,
        ttl_dns_cache=30,
        enable_cleanup_closed=True,
        keepalive_timeout=keepalive_s,
    )
    return aiohttp.ClientSession(
        connector=connector,
        # Per-request timeouts come from the pool; the session default only guards stray calls.
        timeout=aiohttp.ClientTimeout(total=600),
        headers={"accept-encoding": "identity"},
        skip_auto_headers=("User-Agent",),
        auto_decompress=False,
        raise_for_status=False,
    )


@dataclass(slots=True)
class PoolClient:
    """How to reach one pool: its live replica set, auth, timeouts."""

    config: Pool
    headers: dict[str, str]
    timeout: aiohttp.ClientTimeout
    replicas: ReplicaPool
    runtime: PoolRuntime
    affinity_chars: int  # 0 = the pool does not use prefix affinity: skip computing the key

    @classmethod
    def build(
        cls,
        pool: Pool,
        environ: dict[str, str] | os._Environ[str] = os.environ,
        rand: random.Random | None = None,
        hosted_base: str = "",
    ) -> PoolClient:
        """`hosted_base`: the LiteLLM bridge's URL (gateway.upstream.hosted), for `engine: litellm` pools."""
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
        t = pool.timeouts
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
            discovery = StaticDiscovery([hosted_base + path for path in replica_paths(pool)])
        else:
            assert pool.endpoints is not None  # the config requires them
            discovery = discovery_for(pool.endpoints)
        if isinstance(discovery, StaticDiscovery):
            replicas.set_members(discovery.urls)  # usable before discovery starts
        bal = pool.balancing
        return cls(
            config=pool,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s, sock_connect=t.connect_s),
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
        except (H1Error, TimeoutError, OSError):
            return None
        return data.decode("utf-8", "replace") if resp.status == 200 else None

    return fetch
