"""Delivered-answer records shared through Redis, so feedback can reach any gateway replica.

Remembering an answer is on the hot path of every request, so it never waits for Redis: `publish`
appends the raw fields to a bounded in-process buffer (~0.5 µs; hashing and encoding happen in the
flusher), and a background task flushes it every `Flushing.interval_s` (or as soon as `batch`
records wait) as one pipeline of `SET key value EX ttl`.
Redis down or slow: the batch is dropped and counted (`llmgw_feedback_flush_errors_total`,
`llmgw_feedback_dropped_records_total`); a full buffer drops new records the same way, and so does
Redis short of room for growth (gateway.observability.redis_room: the limiter's headroom). Requests never
fail or block because of this; those answers can then only be rated on the replica that served them.

Keys hash (org, request id) (sha256, truncated): request ids are client-controlled and must not
reach key names raw. `rated:` markers are set with NX and the same TTL: one verdict per answer across
all replicas. A client reusing an x-request-id within the TTL finds it already rated (409).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

__all__ = [
    "Delivered",
    "FeedbackStoreUnavailable",
    "Flushing",
    "SharedFeedback",
    "decode",
    "encode",
    "record_key",
]

_HEAD = struct.Struct("!dH")  # delivery time (wall clock, s), pool name length; then pool, extra
_log = logging.getLogger("llmgw.feedback")


@dataclass(frozen=True, slots=True)
class Delivered:
    """One delivered answer: its pool, delivery time (unix s), whether rated, and the caller's
    opaque `extra` (the router's alias, tier, prompt embedding)."""

    pool: str
    at: float
    rated: bool
    extra: bytes | None = None


class Flushing(BaseModel):
    """How records reach Redis: at least every `interval_s`, at most `batch` per pipeline, and at
    most `max_buffer` waiting (more are dropped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: float = Field(0.05, gt=0)
    batch: int = Field(256, ge=1)
    max_buffer: int = Field(10_000, ge=1)


_DEFAULT = Flushing()


class FeedbackStoreUnavailable(Exception):
    """Redis could not be read or written while rating."""


def record_key(prefix: str, org: str, request_id: str) -> str:
    digest = hashlib.sha256(f"{org}\0{request_id}".encode()).hexdigest()[:32]
    # The digest is the hash tag: a record and its `:rated` mark share a Cluster slot (one MGET reads both).
    return f"{prefix}fb:{{{digest}}}"


def encode(pool: str, at: float, extra: bytes | None) -> bytes:
    name = pool.encode()
    return _HEAD.pack(at, len(name)) + name + (extra or b"")


def decode(value: bytes, rated: bool) -> Delivered:
    at, n = _HEAD.unpack_from(value)
    start = _HEAD.size
    extra = value[start + n :]
    return Delivered(value[start : start + n].decode(), at, rated, extra or None)


class SharedFeedback:
    """The Redis side of the feedback store: buffered writes, direct reads (rating is rare)."""

    def __init__(
        self,
        client: aioredis.Redis,
        ttl_s: float,
        registry: CollectorRegistry,
        key_prefix: str = "llmgw:",
        flushing: Flushing = _DEFAULT,
        room: Callable[[], bool] = lambda: True,
    ) -> None:
        self._redis = client
        self._room = room  # whether Redis has room for growth (gateway.observability.redis_room)
        self._ttl = max(1, int(ttl_s))
        self._prefix = key_prefix
        self._interval = flushing.interval_s
        self._batch = flushing.batch
        self._max = flushing.max_buffer
        # Raw fields: hashing and encoding wait for the flusher, off the request's path.
        self._buffer: deque[tuple[str, str, str, float, bytes | None]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.flush_errors = Counter(
            "llmgw_feedback_flush_errors",
            "Failed flushes of delivered-answer records to Redis",
            registry=registry,
        )
        self.dropped = Counter(
            "llmgw_feedback_dropped_records",
            "Delivered-answer records not shared (Redis failing, short of room, or the buffer full)",
            registry=registry,
        )

    def publish(self, org: str, request_id: str, pool: str, at: float, extra: bytes | None) -> None:
        """Queue one record (no I/O; the flusher writes it)."""
        buf = self._buffer
        if len(buf) >= self._max:
            self.dropped.inc()
            return
        buf.append((org, request_id, pool, at, extra))
        if len(buf) >= self._batch:
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._flush_forever())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.flush()  # what is still buffered: best effort

    async def _flush_forever(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.flush()
            except Exception:  # anything but Redis failing (handled in flush): keep sharing, say so
                self.flush_errors.inc()
                _log.exception("feedback flush failed")

    async def flush(self) -> None:
        """Write up to `batch` buffered records per pipeline until the buffer is empty."""
        buf = self._buffer
        while buf:
            n = min(len(buf), self._batch)
            if not self._room():  # Redis is short of memory: the rest is the limiter's
                for _ in range(n):
                    buf.popleft()
                self.dropped.inc(n)
                continue
            pipe = self._redis.pipeline(transaction=False)
            for _ in range(n):
                org, request_id, pool, at, extra = buf.popleft()
                pipe.set(record_key(self._prefix, org, request_id), encode(pool, at, extra), ex=self._ttl)
            try:
                await pipe.execute()
            except (RedisError, OSError) as e:
                self.flush_errors.inc()
                self.dropped.inc(n)
                _log.warning("feedback records not shared (%d dropped): %s", n, e)
                return

    async def find(self, org: str, request_id: str) -> Delivered | None:
        key = record_key(self._prefix, org, request_id)
        try:
            value, rated = await self._redis.mget(key, key + ":rated")
        except (RedisError, OSError) as e:
            raise FeedbackStoreUnavailable(str(e)) from None
        if not isinstance(value, bytes):
            return None
        try:
            return decode(value, rated is not None)
        except (struct.error, UnicodeDecodeError):  # not a record this code wrote: as unknown
            _log.warning("feedback record under %s does not decode", key)
            return None

    async def claim(self, org: str, request_id: str) -> bool:
        """Mark the answer rated; False if some replica already did."""
        key = record_key(self._prefix, org, request_id) + ":rated"
        try:
            return bool(await self._redis.set(key, b"1", nx=True, ex=self._ttl))
        except (RedisError, OSError) as e:
            raise FeedbackStoreUnavailable(str(e)) from None
