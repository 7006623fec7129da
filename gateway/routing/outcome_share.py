"""Outcomes learnt on any replica reach every replica's memory: one Redis stream per routed alias.

Each replica learns from its own exploration, its cascades and the feedback it receives; with N
replicas that is about 1/N of what the deployment learns. With `LLMGW_REDIS_URL` set, every outcome is
also appended (XADD, MAXLEN ~ the memory's capacity) to `{prefix}outcomes:{outcomes}:{alias}` (one
hash tag, so one XREAD polls every stream on a Cluster too) as a `router.memory.to_record` (float16
embedding + label, ~770 bytes at 384 dims) with the replica's id,
and every replica polls the streams (XREAD, no blocking: the client's socket timeout stays short) and
adds the others' outcomes. A starting replica first reads the stream's last `capacity` entries, so a
restart or a scale-up keeps what the deployment has learnt.

Outcomes are rare (a share of requests explored, a few ratings), so writes are buffered and flushed
with the reads, every `interval_s`. Redis failing loses shared outcomes, never requests: the local
memory keeps learning, and failures are counted (`llmgw_router_outcome_share_errors_total`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from gateway.observability.metrics import Metrics
from gateway.routing.learning import Learning
from router.memory import from_record, to_record

__all__ = ["SharedOutcomes"]

_log = logging.getLogger("llmgw.router")
_READ_COUNT = 512  # entries per stream per poll


class SharedOutcomes:
    def __init__(
        self,
        client: aioredis.Redis,
        learnings: Mapping[str, Learning],
        metrics: Metrics,
        key_prefix: str = "llmgw:",
        interval_s: float = 0.5,
    ) -> None:
        self._redis = client
        # Only aliases with a memory take part; each keeps its own stream.
        self._learnings = {a: lr for a, lr in learnings.items() if lr.memory is not None}
        # One hash tag for every alias's stream: one XREAD polls them all, on a Redis Cluster too.
        self._keys = {a: f"{key_prefix}outcomes:{{outcomes}}:{a}" for a in self._learnings}
        self._alias_of = {key: a for a, key in self._keys.items()}
        self._replica = uuid.uuid4().hex[:12].encode()
        self._interval = interval_s
        self._last: dict[str, bytes] = {}  # stream key -> last id read
        self._buffer: deque[tuple[str, bytes, str]] = deque(maxlen=10_000)
        self._task: asyncio.Task[None] | None = None
        self._errors = metrics.router_outcome_share_errors
        for lr in self._learnings.values():
            lr.share = self.publish

    def publish(self, alias: str, embedding: npt.NDArray[np.float32], needs_strong: float, org: str) -> None:
        """Queue one outcome this replica learnt (no I/O here); `org`: one org's rating ("" shared)."""
        self._buffer.append((alias, to_record(embedding, needs_strong), org))

    async def start(self) -> None:
        if not self._learnings:
            return
        await self._warm_up()
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._flush()  # best effort

    async def _warm_up(self) -> None:
        """The deployment's most recent outcomes, oldest first (a failure starts with what is local)."""
        for alias, key in self._keys.items():
            learning = self._learnings[alias]
            assert learning.memory is not None
            try:
                entries: Any = await self._redis.xrevrange(key, count=learning.memory.capacity)
            except (RedisError, OSError) as e:
                self._failed("warm-up", e)
                self._last[key] = b"$"
                continue
            self._last[key] = entries[0][0] if entries else b"0-0"
            self._absorb(learning, reversed(entries), own_too=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._flush()
            await self._poll()

    async def _flush(self) -> None:
        buf = self._buffer
        if not buf:
            return
        pipe = self._redis.pipeline(transaction=False)
        n = len(buf)
        for _ in range(n):
            alias, record, org = buf.popleft()
            cap = self._learnings[alias].memory
            assert cap is not None
            fields: dict[Any, Any] = {b"r": self._replica, b"o": record}
            if org:
                fields[b"g"] = org.encode()  # whose rating: it teaches that org's memory only
            pipe.xadd(self._keys[alias], fields, maxlen=cap.capacity, approximate=True)
        try:
            await pipe.execute()
        except (RedisError, OSError) as e:
            self._failed(f"{n} outcomes not shared", e)

    async def _poll(self) -> None:
        if not self._last:
            return
        streams: dict[Any, Any] = dict(self._last)
        try:
            got: Any = await self._redis.xread(streams, count=_READ_COUNT)
        except (RedisError, OSError) as e:
            self._failed("read", e)
            return
        for key, entries in got or ():
            name = key.decode() if isinstance(key, bytes) else str(key)
            alias = self._alias_of.get(name)
            if alias is None or not entries:
                continue
            self._last[name] = entries[-1][0]
            self._absorb(self._learnings[alias], entries, own_too=False)

    def _absorb(self, learning: Learning, entries: Any, own_too: bool) -> None:
        for _, fields in entries:
            if not own_too and fields.get(b"r") == self._replica:
                continue  # learnt here already
            try:
                emb, label = from_record(fields[b"o"])
                org = fields.get(b"g", b"").decode()
            except (KeyError, ValueError):
                continue  # not a record of ours
            learning.shared(emb, label, org)

    def _failed(self, what: str, e: BaseException) -> None:
        self._errors.inc()
        _log.warning("router outcome sharing: %s: %s", what, e)
