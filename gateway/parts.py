"""Build the gateway's long-lived parts from policy + settings (no I/O here; `start` does the I/O).

Which limiter: `limits.backend: memory` is one process's in-memory limiter (the embedded default);
`redis` is the shared Redis backend wrapped in `FailoverLimiter`, which applies each pool's failure
mode (`Pool.backend_error_mode`: the pool's `on_backend_error`, else fail_closed for litellm, else
`limits.on_backend_error`; fail_open with a local in-memory limiter, or fail_closed) and returns to
Redis by itself. `start` checks the Redis deployment first and refuses one the limiter cannot work
with (Redis Cluster, too old); Redis merely failing at start leaves the decision to the failure mode.
Keys: config keys always; dynamic keys in memory or in Redis (`tenancy.store`).
Redis clients use short timeouts and no client-side retries: the failover layer decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.budget.admission import Admissions
from gateway.config import ConfigError, Policy
from gateway.observability.metrics import FailoverCollector, Metrics
from gateway.settings import Settings
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import KeyRecord, KeyStore, MemoryKeyStore, RedisKeyStore, static_records
from ratelimit.errors import BackendUnavailable, UnsupportedBackend
from ratelimit.failover import FailoverLimiter, FailoverStats
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Limiter
from ratelimit.redis_backend import RedisBackend


@dataclass
class Components:
    metrics: Metrics
    store: KeyStore
    auth: Authenticator
    limiter: Limiter
    admissions: Admissions
    redis_backend: RedisBackend | None
    redis: aioredis.Redis | None
    static_keys: tuple[KeyRecord, ...]
    failover: FailoverStats | None = None

    async def start(self) -> None:
        await self.store.start()  # hears other replicas' key revocations until `close`
        if self.redis_backend is None:
            return
        try:
            await self.redis_backend.check()
            await self.redis_backend.load()
        except UnsupportedBackend as e:
            logging.getLogger("llmgw.ratelimit").error("cannot start: %s", e)
            raise ConfigError(str(e)) from None
        except BackendUnavailable as e:  # Redis failing at start: the failure mode decides, not a crash
            self.metrics.limit_decisions.labels("all", "all", "script_load_failed").inc()
            if self.failover is not None:
                self.failover.count("load", e.reason)

    async def close(self) -> None:
        await self.admissions.drain()
        await self.limiter.close()
        await self.store.close()
        if self.redis is not None:
            await self.redis.aclose()


def check_deployment(policy: Policy, settings: Settings) -> None:
    """Combinations of policy and process settings that cannot work (checked before serving)."""
    limits, tenancy = policy.limits, policy.tenancy
    if (limits.backend == "redis" or tenancy.store == "redis") and not settings.redis_url:
        raise ConfigError(
            "LLMGW_REDIS_URL is not set, but the policy uses Redis (limits.backend / tenancy.store)"
        )
    if settings.workers > 1 and (limits.backend == "memory" or tenancy.store == "memory"):
        raise ConfigError(
            "limits.backend / tenancy.store 'memory' keep state in one process: "
            f"{settings.workers} workers would each enforce the whole budget; use one worker or Redis"
        )


def build(policy: Policy, settings: Settings) -> Components:
    limits, tenancy = policy.limits, policy.tenancy
    check_deployment(policy, settings)
    # The key store (rare, cached lookups) uses redis-py; the limiter (every request) its lean client.
    client = (
        aioredis.Redis.from_url(
            settings.redis_url,
            socket_connect_timeout=settings.redis_timeout_s,
            socket_timeout=settings.redis_timeout_s,
            # Key reads are idempotent: one retry absorbs a pooled connection that went stale while
            # Redis restarted, instead of failing that lookup.
            retry=Retry(NoBackoff(), 1),
            decode_responses=False,
        )
        if settings.redis_url  # also shares delivered answers for feedback (gateway.observability)
        else None
    )
    metrics = Metrics(policy)
    local = MemoryBackend(lease_s=limits.lease_s, sub_window_s=limits.sub_window_s)
    redis_backend: RedisBackend | None = None
    failover: FailoverLimiter | None = None
    limiter: Limiter
    if limits.backend == "redis" and settings.redis_url:
        redis_backend = RedisBackend.from_url(
            settings.redis_url,
            lease_s=limits.lease_s,
            key_prefix=limits.key_prefix,
            sub_window_s=limits.sub_window_s,
            connect_timeout_s=settings.redis_timeout_s,
            op_timeout_s=settings.redis_timeout_s,
        )
        failover = FailoverLimiter(redis_backend, local, limits.on_backend_error)
        metrics.registry.register(FailoverCollector(failover.stats))
        limiter = failover
    else:
        limiter = local
    statics = static_records(tenancy)
    store: KeyStore = (
        RedisKeyStore(client, limits.key_prefix)
        if tenancy.store == "redis" and client is not None
        else MemoryKeyStore()
    )
    auth = Authenticator(tenancy, limits, store, metrics=metrics)
    return Components(
        metrics=metrics,
        store=store,
        auth=auth,
        limiter=limiter,
        admissions=Admissions(
            limits,
            limiter,
            metrics,
            {p.name: p.backend_error_mode(limits.on_backend_error) for p in policy.pools},
        ),
        redis_backend=redis_backend,
        redis=client,
        static_keys=statics,
        failover=failover.stats if failover is not None else None,
    )
