"""The spool: rows between the replica that recorded them and PostgreSQL, surviving a database outage.

`RedisSpool` is one Redis stream shared by every replica, `{key_prefix}:ledger:spool` (one key: Cluster-
safe, and under the `P:` every gateway key starts with, docs/design/004), each entry one encoded
`SpendRow` in the field `r`, read through one consumer group, `drainers`:

    append   XLEN, then one pipeline of XADDs (the rows that fit under `max_rows`; the caller keeps
             the others: never trimmed); a pipeline cut by a failure may have added some rows and
             the caller appends them again: the ledger's primary key makes the second copy a no-op.
             The spool shares Redis with the limiter: while `room()` says no (the app's `RedisRoom`,
             gateway/observability/redis_room.py: Redis's used_memory over its share of maxmemory),
             nothing is appended, so the spool never drives Redis into OOM errors that would refuse
             the limiter's writes too (design §4: state that grows with traffic never shares memory
             with the limiter unprotected); the rows wait in the replicas' memory meanwhile
    read     this consumer's own unacknowledged entries first (XREADGROUP 0: a batch whose write
             failed is retried, and reading it again resets its idle time, so no live replica loses
             it to a claim), then entries a dead replica left pending for over `claim_idle_ms`
             (XAUTOCLAIM, every `claim_every_s`), then new ones (XREADGROUP >); never blocking, as the
             gateway's Redis clients keep short socket timeouts
    ack      XACK + XDEL in one pipeline, once the rows are in PostgreSQL (the stream holds only what
             is still to be written, so XLEN is the backlog)

A consumer is one process (`host-pid-random`); a missing group (a Redis restarted empty, a FLUSHDB) is
created again from id 0, so rows appended before any drainer existed are drained too. Redis failing is
`SpoolUnavailable`: the ledger keeps its rows in memory and tries again.

`MemorySpool` is the same contract for one process without Redis (its rows die with the process). It
holds the `SpendRow`s themselves: only a spool that leaves the process encodes them (an encode and a
decode per row were a third of the ledger's CPU per request, doc 029).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from gateway.ledger.model import SpendRow

__all__ = ["GROUP", "Entry", "MemorySpool", "RedisSpool", "Spool", "SpoolUnavailable", "spool_key"]

GROUP = "drainers"
_FIELD = b"r"


class SpoolUnavailable(Exception):
    """The spool cannot be reached (Redis down, a timeout): nothing was lost, try again later."""


class Entry(NamedTuple):
    id: str
    # None: deleted before it was read, or not a spend row (`error` says why): acknowledge it, there is
    # nothing to write.
    row: SpendRow | None
    error: str | None = None


class Spool(Protocol):
    async def append(self, rows: Sequence[SpendRow]) -> int:
        """Append the first rows that fit the bound; return how many. SpoolUnavailable: maybe none."""
        ...

    async def read(self, count: int) -> list[Entry]:
        """Up to `count` entries for this consumer to write (its unacknowledged ones first)."""
        ...

    async def ack(self, ids: Sequence[str]) -> None:
        """The entries are in PostgreSQL: remove them."""
        ...

    async def length(self) -> int:
        """Rows in the spool, read or not: the backlog."""
        ...


def spool_key(key_prefix: str) -> str:
    return f"{key_prefix}:ledger:spool"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisSpool:
    """The shared spool on a redis-py asyncio client (`redis.asyncio.Redis` or `RedisCluster`)."""

    def __init__(
        self,
        client: aioredis.Redis | aioredis.RedisCluster,
        *,
        key_prefix: str = "llmgw",
        max_rows: int = 2_000_000,
        consumer: str | None = None,
        claim_idle_ms: int = 30_000,
        claim_every_s: float = 5.0,
        room: Callable[[], bool] | None = None,
    ) -> None:
        self._redis: Any = client  # the two client classes share these commands, not a type
        self.key = spool_key(key_prefix)
        self.max_rows = max_rows
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._claim_idle_ms = claim_idle_ms
        self._claim_every_s = claim_every_s
        self._next_claim = 0.0
        self._claim_cursor = "0-0"
        self._unacked: set[str] = set()  # read by this consumer, not yet acknowledged
        self._group_ready = False
        self._room = room

    async def append(self, rows: Sequence[SpendRow]) -> int:
        if not rows:
            return 0
        try:
            if self._room is not None and not self._room():
                return 0
            free = self.max_rows - int(await self._redis.xlen(self.key))
            take = rows[: max(free, 0)]
            if take:
                pipe = self._redis.pipeline(transaction=False)
                for row in take:
                    pipe.xadd(self.key, {_FIELD: row.encode()})
                await pipe.execute()
        except (RedisError, OSError) as e:
            raise SpoolUnavailable(f"redis: {type(e).__name__}: {e}") from e
        return len(take)

    async def read(self, count: int) -> list[Entry]:
        try:
            if self._unacked:
                own = await self._group_read("0", count)
                if own:
                    return own
                self._unacked.clear()  # gone from Redis (acknowledged elsewhere, or Redis lost them)
            now = time.monotonic()
            if now >= self._next_claim:
                claimed = await self._claim(count)
                if claimed:
                    return claimed
                if self._claim_cursor == "0-0":  # the whole pending list seen: wait before scanning again
                    self._next_claim = now + self._claim_every_s
            return await self._group_read(">", count)
        except (RedisError, OSError) as e:
            raise SpoolUnavailable(f"redis: {type(e).__name__}: {e}") from e

    async def ack(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.xack(self.key, GROUP, *ids)
            pipe.xdel(self.key, *ids)
            await pipe.execute()
        except (RedisError, OSError) as e:
            raise SpoolUnavailable(f"redis: {type(e).__name__}: {e}") from e
        self._unacked.difference_update(ids)

    async def length(self) -> int:
        try:
            return int(await self._redis.xlen(self.key))
        except (RedisError, OSError) as e:
            raise SpoolUnavailable(f"redis: {type(e).__name__}: {e}") from e

    async def _ensure_group(self) -> None:
        try:
            # From id 0, not $: rows appended before the group existed are drained too.
            await self._redis.xgroup_create(self.key, GROUP, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self._group_ready = True

    async def _group_read(self, start: str, count: int) -> list[Entry]:
        if not self._group_ready:
            await self._ensure_group()
        try:
            got: Any = await self._redis.xreadgroup(GROUP, self.consumer, {self.key: start}, count=count)
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            await self._ensure_group()  # the stream or group vanished (Redis restarted empty, FLUSHDB)
            got = await self._redis.xreadgroup(GROUP, self.consumer, {self.key: start}, count=count)
        entries: Any = []
        if isinstance(got, dict):  # RESP3
            entries = next(iter(got.values()), [[]])[0] if got else []
        elif got:
            entries = got[0][1]
        return self._entries(entries)

    async def _claim(self, count: int) -> list[Entry]:
        if not self._group_ready:
            await self._ensure_group()
        try:
            got: Any = await self._redis.xautoclaim(
                self.key, GROUP, self.consumer, self._claim_idle_ms, start_id=self._claim_cursor, count=count
            )
        except ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            self._group_ready = False
            return []
        self._claim_cursor = _text(got[0])
        return self._entries(got[1])

    def _entries(self, raw: Any) -> list[Entry]:
        out: list[Entry] = []
        for entry_id, fields in raw or ():
            rid = _text(entry_id)
            payload = (fields or {}).get(_FIELD, (fields or {}).get("r"))
            if isinstance(payload, str):
                payload = payload.encode()
            out.append(_entry(rid, payload))
            self._unacked.add(rid)
        return out


def _entry(entry_id: str, payload: bytes | None) -> Entry:
    if payload is None:
        return Entry(entry_id, None)
    try:
        return Entry(entry_id, SpendRow.decode(payload))
    except ValueError as e:
        return Entry(entry_id, None, str(e))


class MemorySpool:
    """The spool of one process (no Redis): bounded by `max_rows`, lost with the process."""

    def __init__(self, max_rows: int = 2_000_000) -> None:
        self.max_rows = max_rows
        self._new: OrderedDict[str, SpendRow] = OrderedDict()
        self._pending: OrderedDict[str, SpendRow] = OrderedDict()  # read, not acknowledged
        self._seq = 0

    async def append(self, rows: Sequence[SpendRow]) -> int:
        take = rows[: max(self.max_rows - len(self._new) - len(self._pending), 0)]
        for row in take:
            self._seq += 1
            self._new[str(self._seq)] = row
        return len(take)

    async def read(self, count: int) -> list[Entry]:
        if self._pending:
            return [Entry(i, p) for i, p in list(self._pending.items())[:count]]
        out: list[Entry] = []
        while self._new and len(out) < count:
            i, p = self._new.popitem(last=False)
            self._pending[i] = p
            out.append(Entry(i, p))
        return out

    async def ack(self, ids: Sequence[str]) -> None:
        for i in ids:
            self._pending.pop(i, None)

    async def length(self) -> int:
        return len(self._new) + len(self._pending)
