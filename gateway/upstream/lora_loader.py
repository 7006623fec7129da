"""Loading a LoRA adapter on a replica on demand (`/v1/load_lora_adapter`), once per replica.

A pool with `lora.runtime_loading` starts its replicas without the adapters; the first request for an
adapter that its picked replica does not serve loads it there first. Concurrent first requests share
one load (one future per replica and adapter); vLLM's "has already been loaded" (another gateway
replica was faster, or the engine started with it) counts as success. The gateway never unloads:
vLLM's LRU decides which adapters sit in its `--max-loras` slots. A failed load is a 502 naming the
adapter (the replica is not blamed: its breaker sees nothing). The load is a control call through the
replica's transport (gateway.upstream.transport), never retried.

A failed load is remembered per replica and adapter (negative caching): for `lora.load_backoff_s`,
doubling per further failure up to `load_backoff_max_s`, requests for it there get the same 502 at once
(`llmgw_adapter_loads_total{outcome="backoff"}`) instead of another load, so an adapter that cannot
load costs one attempt per replica per backoff period, not one per request. A success clears it.
"""

from __future__ import annotations

import asyncio
import logging

import orjson

from gateway.config_lora import Adapter
from gateway.errors import TransportError, UpstreamError
from gateway.observability.adapter_metrics import AdapterMetrics
from gateway.upstream.failures import LOG_TEXT_MAX
from gateway.upstream.pool_client import PoolClient
from gateway.upstream.transport import Request, Transports
from pools.replica import Replica

__all__ = ["AdapterLoader"]

log = logging.getLogger(__name__)

_ALREADY = b"has already been loaded"


class AdapterLoader:
    def __init__(self, transports: Transports, metrics: AdapterMetrics) -> None:
        self._transports = transports
        self._metrics = metrics
        self._loading: dict[tuple[int, str], asyncio.Future[None]] = {}
        # (replica, adapter) -> (loop time until which loads are not tried, failures in a row, the 502).
        # Bounded: replicas x the policy's adapters.
        self._failed: dict[tuple[int, str], tuple[float, int, UpstreamError]] = {}

    async def ensure(self, pool: PoolClient, replica: Replica, adapter: Adapter) -> None:
        """Return once `replica` serves `adapter` (loading it if the pool loads at run time)."""
        lora, state = pool.config.lora, replica.adapters
        if lora is None or not lora.runtime_loading or state is None or adapter.name in state.registered:
            return
        key = (id(replica), adapter.name)
        loop = asyncio.get_running_loop()
        backoff = self._failed.get(key)
        if backoff is not None and loop.time() < backoff[0]:
            self._count(pool.config.name, adapter.name, "backoff")
            raise backoff[2]
        pending = self._loading.get(key)
        if pending is None:
            pending = loop.create_future()
            self._loading[key] = pending
            try:
                await self._load(pool, replica, adapter)
            except BaseException as exc:
                # Every waiter sees the same failure; a cancelled loader hands them a retryable 502.
                failed = exc if isinstance(exc, UpstreamError) else _failed(pool, adapter, "cancelled")
                if isinstance(exc, UpstreamError):  # the replica answered, or not at all: back off
                    self._back_off(key, lora.load_backoff_s, lora.load_backoff_max_s, exc, loop.time())
                pending.set_exception(failed)
                pending.exception()  # retrieved: no "never retrieved" warning when nobody waits
                raise
            else:
                self._failed.pop(key, None)
                pending.set_result(None)
            finally:
                del self._loading[key]
            return
        await asyncio.shield(pending)

    def _back_off(
        self, key: tuple[int, str], base: float, cap: float, err: UpstreamError, now: float
    ) -> None:
        failures = self._failed[key][1] + 1 if key in self._failed else 1
        wait = min(cap, base * 2 ** min(failures - 1, 30))
        self._failed[key] = (now + wait, failures, err)

    async def _load(self, pool: PoolClient, replica: Replica, adapter: Adapter) -> None:
        cfg = pool.config
        assert cfg.lora is not None and replica.adapters is not None
        body = orjson.dumps({"lora_name": adapter.name, "lora_path": adapter.source})
        timeout = cfg.lora.load_timeout_s
        request = Request(
            "POST",
            replica.base,
            "/v1/load_lora_adapter",
            pool.headers,
            body,
            connect_s=min(cfg.timeouts.connect_s, timeout),
            total_s=timeout,
        )
        try:
            reply = await self._transports.of(replica).handle(request)
            try:
                status, text = reply.status, await reply.read()
            finally:
                reply.release()
        except TransportError as exc:
            self._count(cfg.name, adapter.name, "failed")
            log.warning("pool %r: loading %r on %s failed: %r", cfg.name, adapter.name, replica.base, exc)
            raise _failed(pool, adapter, "the replica did not answer") from None
        if status == 200 or (status == 400 and _ALREADY in text):
            self._count(cfg.name, adapter.name, "loaded" if status == 200 else "already_loaded")
            replica.adapters.loaded(adapter.name, asyncio.get_running_loop().time())
            return
        self._count(cfg.name, adapter.name, "failed")
        detail = text[:LOG_TEXT_MAX].decode("utf-8", "replace")
        where = (cfg.name, adapter.name, replica.base)
        log.warning("pool %r: loading %r on %s: HTTP %d %s", *where, status, detail)
        raise _failed(pool, adapter, f"HTTP {status}")

    def _count(self, pool: str, adapter: str, outcome: str) -> None:
        self._metrics.loads.labels(pool, adapter, outcome).inc()


def _failed(pool: PoolClient, adapter: Adapter, why: str) -> UpstreamError:
    return UpstreamError(
        f"pool '{pool.config.name}' could not load the adapter '{adapter.name}' ({why})",
        code="adapter_load_failed",
    )
