"""Build the gateway's long-lived parts from policy + settings (no I/O here; `start` does the I/O).

Which limiter: `limits.backend: memory` is one process's in-memory limiter (the embedded default);
`redis` is the shared Redis backend wrapped in `FailoverLimiter`, which applies each pool's failure
mode (`Pool.backend_error_mode`: the pool's `on_backend_error`, else fail_closed for litellm, else
`limits.on_backend_error`; fail_open with a local in-memory limiter, or fail_closed) and returns to
Redis by itself. Every Redis client comes from `gateway.redis_conn` (standalone, sentinel or cluster,
TLS, ACL user: the `LLMGW_REDIS_*` settings). `start` checks the deployment first and refuses settings
that cannot work (a server of another mode, credentials or TLS refused, no sentinel answering; a Redis
too old for the limiter's scripts); Redis merely failing at start (down, timing out) leaves the decision
to the failure mode. Keys: config keys always; dynamic keys in memory or in Redis (`tenancy.store`).
The limiter's client has short timeouts and no retries: the failover layer decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.budget.admission import Admissions
from gateway.budget.overrides import BudgetOverrides, MemoryBudgetStore, RedisBudgetStore
from gateway.config import ConfigError, Policy
from gateway.observability.metrics import FailoverCollector, Metrics
from gateway.redis_conn import (
    RedisConfigError,
    RedisTarget,
    check_server,
    config_problem,
    redis_client,
    script_client,
    target_of,
)
from gateway.settings import Settings
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import KeyRecord, KeyStore, MemoryKeyStore, RedisKeyStore, static_records
from ratelimit.errors import BackendUnavailable, UnsupportedBackend
from ratelimit.failover import FailoverLimiter, FailoverStats
from ratelimit.legacy import move_legacy_counters
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Limiter
from ratelimit.redis_backend import RedisBackend
from ratelimit.resp import CLIENT_ERRORS

log = logging.getLogger("llmgw.ratelimit")


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
    target: RedisTarget | None = None
    key_prefix: str = "llmgw"
    budgets: BudgetOverrides | None = None

    async def start(self) -> None:
        if self.target is not None and self.redis is not None:
            await self._check_redis(self.target, self.redis)
        await self.store.start()  # hears other replicas' key revocations until `close`
        if self.budgets is not None:
            await self.budgets.start()  # run-time budgets (the admin API), polled until `close`
        if self.redis_backend is None:
            return
        try:
            await self.redis_backend.check()
            await self.redis_backend.load()
        except UnsupportedBackend as e:
            log.error("cannot start: %s", e)
            raise ConfigError(str(e)) from None
        except BackendUnavailable as e:  # Redis failing at start: the failure mode decides, not a crash
            if self.target is not None and (problem := config_problem(self.target, e)) is not None:
                log.error("cannot start: %s", problem)  # the limiter's own client was refused
                raise RedisConfigError(problem) from None
            self.metrics.limit_decisions.labels("all", "all", "script_load_failed").inc()
            if self.failover is not None:
                self.failover.count("load", e.reason)
            return
        if self.redis is not None:
            await self._move_legacy_counters(self.redis)

    async def _move_legacy_counters(self, client: aioredis.Redis) -> None:
        """Quota and minute counters of a pre-0.3 gateway move to their names under the root, so the
        upgrade forgets no tenant's usage (`ratelimit.legacy`). A failure only logs: the counters
        stay where they are until a later start moves them."""
        try:
            moved = await move_legacy_counters(client, self.key_prefix)
        except RedisError as e:
            log.warning("limiter: the pre-0.3 counters could not be moved (%s)", e)
            return
        if moved.quota or moved.windows:
            log.info(
                "limiter: moved %d quota, %d minute counters from pre-0.3 names", moved.quota, moved.windows
            )

    @staticmethod
    async def _check_redis(target: RedisTarget, client: aioredis.Redis) -> None:
        try:
            await check_server(target, client)
        except RedisConfigError as e:
            log.error("cannot start: %s", e)
            raise
        except CLIENT_ERRORS as e:
            log.warning("Redis (%s) did not answer at start: %s; the failure mode decides", target.where, e)

    async def close(self) -> None:
        if self.budgets is not None:
            await self.budgets.close()
        await self.admissions.drain()
        await self.limiter.close()
        await self.store.close()
        if self.redis is not None:
            await self.redis.aclose()


def check_deployment(policy: Policy, settings: Settings) -> RedisTarget | None:
    """Combinations of policy and process settings that cannot work (checked before serving); the
    Redis the settings describe (None: no Redis)."""
    limits, tenancy = policy.limits, policy.tenancy
    target = target_of(settings)
    if (limits.backend == "redis" or tenancy.store == "redis") and target is None:
        raise ConfigError(
            "LLMGW_REDIS_URL is not set, but the policy uses Redis (limits.backend / tenancy.store)"
        )
    if settings.workers > 1 and (limits.backend == "memory" or tenancy.store == "memory"):
        raise ConfigError(
            "limits.backend / tenancy.store 'memory' keep state in one process: "
            f"{settings.workers} workers would each enforce the whole budget; use one worker or Redis"
        )
    return target


def build(policy: Policy, settings: Settings) -> Components:
    limits, tenancy = policy.limits, policy.tenancy
    target = check_deployment(policy, settings)
    # The general client: key store, feedback, outcome memory, calibration, revocations.
    client = redis_client(target) if target is not None else None
    metrics = Metrics(policy)
    local = MemoryBackend(
        lease_s=limits.lease_s, sub_window_s=limits.sub_window_s, timezone=limits.quota_timezone
    )
    redis_backend: RedisBackend | None = None
    failover: FailoverLimiter | None = None
    limiter: Limiter
    if limits.backend == "redis" and target is not None:
        redis_backend = RedisBackend(
            script_client(target),
            lease_s=limits.lease_s,
            key_prefix=limits.key_prefix,
            sub_window_s=limits.sub_window_s,
            timezone=limits.quota_timezone,
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
    # Budgets changed through the admin API: shared through Redis when there is one (any replica's
    # change reaches every replica within a second), else this process's own.
    budgets = BudgetOverrides(
        RedisBudgetStore(client, limits.key_prefix) if client is not None else MemoryBudgetStore()
    )
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
            budgets,
        ),
        redis_backend=redis_backend,
        redis=client,
        static_keys=statics,
        failover=failover.stats if failover is not None else None,
        target=target,
        key_prefix=limits.key_prefix,
        budgets=budgets,
    )
