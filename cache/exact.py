"""Exact-cache stores: Redis (shared by every gateway replica) and in-process memory (`make run`).

Both keep opaque entry bytes under the keys `cache.key.exact_key` derives, with a TTL. One key per
command, so Redis Cluster needs nothing special: each entry lives in its own key's slot. Values are
written with `SET ... PX` in one command: an entry is either absent or complete.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from cache.commands import Commands


class ExactStore(Protocol):
    async def get(self, key: bytes) -> bytes | None: ...

    async def set(self, key: bytes, value: bytes, ttl_s: float) -> None: ...


class RedisExactStore:
    def __init__(self, commands: Commands) -> None:
        self._redis = commands

    async def get(self, key: bytes) -> bytes | None:
        value = await self._redis.execute(b"GET", key)
        return value if isinstance(value, bytes) else None

    async def set(self, key: bytes, value: bytes, ttl_s: float) -> None:
        await self._redis.execute(b"SET", key, value, b"PX", max(1, int(ttl_s * 1000)))


class MemoryExactStore:
    """Bounded by total bytes (least recently used goes first) and by each entry's TTL."""

    def __init__(self, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_bytes
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: bytes) -> bytes | None:
        item = self._entries.get(key)
        if item is None:
            return None
        expires, value = item
        if expires <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def set(self, key: bytes, value: bytes, ttl_s: float) -> None:
        cost = len(key) + len(value)
        if cost > self._max:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (self._clock() + ttl_s, value)
        self._bytes += cost
        while self._bytes > self._max:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _drop(self, key: bytes) -> None:
        _, value = self._entries.pop(key)
        self._bytes -= len(key) + len(value)
