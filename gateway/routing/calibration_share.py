"""Live calibration across replicas: every replica's cut rests on the whole deployment's recent scores.

Each replica's `router.calibration.LiveCalibration` sketches the scores it routed. With
`LLMGW_REDIS_URL` set, every `interval_s` each replica writes its own sketch (`to_bytes`, a few KB) into
the hash `{prefix}calibration:{alias}` under its replica id, stamped with the time, and reads the
others' (HGETALL): sketches stamped within `stale_s` are merged (`merge_bytes` replaces the peers'
state, so nothing is counted twice), older ones are deleted (a replica that went away). One HSET and
one HGETALL per alias and interval: nothing on the request path.

Redis failing leaves each replica on its own sketch (what it had before sharing existed); failures
are counted in `llmgw_router_calibration_share_errors_total`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from gateway.observability.metrics import Metrics

if TYPE_CHECKING:
    from router.calibration import LiveCalibration  # ddsketch loads only when a live cut is used

__all__ = ["SharedCalibration"]

_log = logging.getLogger("llmgw.router")
_STAMP = struct.Struct("!d")  # wall-clock seconds the sketch was written, then the sketch


class SharedCalibration:
    def __init__(
        self,
        client: aioredis.Redis,
        calibrations: Mapping[str, LiveCalibration],
        metrics: Metrics,
        key_prefix: str = "llmgw:",
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = client
        self._calibrations = dict(calibrations)
        self._keys = {a: f"{key_prefix}calibration:{a}" for a in self._calibrations}
        self._replica = uuid.uuid4().hex[:12].encode()
        self._interval = interval_s
        self._stale = max(5.0, 5 * interval_s)
        self._clock = clock
        self._errors = metrics.router_calibration_share_errors
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._calibrations and self._task is None:
            self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:  # leave the deployment's calibration at once rather than after `stale_s`
            pipe = self._redis.pipeline(transaction=False)
            for key in self._keys.values():
                pipe.hdel(key, self._replica)
            await pipe.execute()
        except (RedisError, OSError):
            pass

    async def _run(self) -> None:
        while True:
            await self.sync()
            await asyncio.sleep(self._interval)

    async def sync(self) -> None:
        """Publish this replica's sketches and merge the live peers' (one round trip)."""
        now = self._clock()
        pipe = self._redis.pipeline(transaction=False)
        for alias, key in self._keys.items():
            pipe.hset(key, self._replica, _STAMP.pack(now) + self._calibrations[alias].to_bytes())
            pipe.hgetall(key)
        try:
            replies = await pipe.execute()
        except (RedisError, OSError) as e:
            self._errors.inc()
            _log.warning("router calibration sharing failed: %s", e)
            return
        for (alias, key), peers in zip(self._keys.items(), replies[1::2], strict=True):
            fresh, stale = [], []
            for replica, value in peers.items():
                if replica == self._replica:
                    continue
                if len(value) < _STAMP.size or now - _STAMP.unpack_from(value)[0] > self._stale:
                    stale.append(replica)
                else:
                    fresh.append(value[_STAMP.size :])
            self._calibrations[alias].merge_bytes(fresh)
            if stale:
                try:
                    await self._redis.hdel(key, *stale)
                except (RedisError, OSError):
                    self._errors.inc()
