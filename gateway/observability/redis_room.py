"""Room in the shared Redis for state that grows with traffic, so that it can never starve the limiter.

The limiter's and key store's keys are few and bounded (rules x tenants, leases x requests in flight),
but delivered-answer records for feedback and cached answers grow with traffic: at ~76 routed req/s
they filled the chart's 256 MB `noeviction` Redis in an hour, the limiter's scripts then failed with
OOM, `fail_open` fell back to per-replica limiters, and a 3,000 tokens/min key was admitted 5,800.

`RedisRoom` reads `INFO memory` every `interval_s` (one call per replica, off the request path) and
says whether those growth writers may write: while `used_memory` is at or over `max_ratio` of
`maxmemory`, they drop their writes (each counts what it dropped) and the rest is the limiter's
reserved headroom. Redis without `maxmemory` has no OOM to protect against: growth is allowed, and
the used bytes are still exported. Until the first reading, and while Redis cannot be read, growth
writers hold back (their records are best-effort; budgets are not).

Exported: `llmgw_redis_used_memory_bytes`, `llmgw_redis_maxmemory_bytes` (0: no limit) and
`llmgw_redis_growth_paused` (1 while growth writers hold back); the chart alerts on their ratio.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge

__all__ = ["DEFAULT_MAX_RATIO", "RedisRoom", "room_for"]

DEFAULT_MAX_RATIO = 0.7
_log = logging.getLogger("llmgw.redis")


class _Info(Protocol):
    def info(self, section: str) -> Awaitable[Mapping[str, Any]]: ...


def room_for(used: int, maxmemory: int, max_ratio: float) -> bool:
    """Whether growth writers may write at this reading (a pure decision: unit-tested)."""
    return maxmemory <= 0 or used < max_ratio * maxmemory


class RedisRoom:
    def __init__(
        self,
        redis: _Info,
        registry: CollectorRegistry,
        max_ratio: float = DEFAULT_MAX_RATIO,
        interval_s: float = 1.0,
    ) -> None:
        self._redis = redis
        self._max_ratio = max_ratio
        self._interval = interval_s
        self._room = False  # nothing read yet: hold back
        self._task: asyncio.Task[None] | None = None
        self._used = Gauge(
            "llmgw_redis_used_memory_bytes", "Redis used_memory (INFO memory)", registry=registry
        )
        self._max = Gauge("llmgw_redis_maxmemory_bytes", "Redis maxmemory (0: no limit)", registry=registry)
        self._paused = Gauge(
            "llmgw_redis_growth_paused",
            "1 while feedback records and cached answers are not written to Redis (over the memory "
            "share they may use, or Redis unreadable): the rest is the limiter's headroom",
            registry=registry,
        )
        self._paused.set(1)

    @property
    def room(self) -> bool:
        return self._room

    async def read(self) -> None:
        """One reading of INFO memory."""
        try:
            info = await self._redis.info("memory")
            used, maxmemory = int(info["used_memory"]), int(info.get("maxmemory", 0))
        except Exception as e:  # unreadable: hold back, try again next tick
            if self._room:
                _log.warning("redis memory unreadable, growth writers hold back: %r", e)
            self._room = False
        else:
            self._used.set(used)
            self._max.set(maxmemory)
            room = room_for(used, maxmemory, self._max_ratio)
            if room != self._room:
                _log.warning(
                    "redis memory %d of %d bytes: growth writers %s",
                    used,
                    maxmemory,
                    "resume" if room else f"hold back (over {self._max_ratio:.0%})",
                )
            self._room = room
        self._paused.set(0 if self._room else 1)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(self._interval)
