"""Ledgers of several replicas on one real redis-server spool and one real PostgreSQL: every row lands once,
a dead replica's pending rows are claimed by another, and rows wait in memory while Redis is down."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from ledger_rows import make_row
from prometheus_client import CollectorRegistry

from gateway.ledger.config import LedgerConfig
from gateway.ledger.spool import GROUP, RedisSpool, spool_key
from gateway.ledger.store import SpendStore
from gateway.ledger.writer import Ledger
from gateway.observability.redis_room import RedisRoom
from tests.support.poll import wait_until_async
from tests.support.postgres import PostgresServer
from tests.support.redis_server import REDIS_SERVER, RedisServer

CONFIG = LedgerConfig(enabled=True, flush_ms=50, batch_rows=100, memory_rows=20_000, spool_max_rows=100_000)


class Replicas:
    """Ledgers built for one test, each on its own Redis client and store, all closed at its end."""

    def __init__(self, redis_url: str, key_prefix: str) -> None:
        self.redis_url = redis_url
        self.key_prefix = key_prefix
        self.ledgers: list[Ledger] = []
        self.registries: list[CollectorRegistry] = []
        self._closers: list[object] = []
        self._clients: list[aioredis.Redis] = []
        self._stores: list[SpendStore] = []

    def client(self) -> aioredis.Redis:
        c = aioredis.Redis.from_url(self.redis_url, socket_timeout=0.5)
        self._clients.append(c)
        return c

    async def ledger(
        self, database_url: str | None, config: LedgerConfig = CONFIG, **spool_options: Any
    ) -> tuple[Ledger, RedisSpool]:
        spool = RedisSpool(
            self.client(), key_prefix=self.key_prefix, max_rows=config.spool_max_rows, **spool_options
        )
        store = None
        if database_url is not None:
            store = await SpendStore.connect(database_url)
            self._stores.append(store)
        registry = CollectorRegistry()
        ledger = Ledger(config, spool, store, registry, self.key_prefix)
        self.ledgers.append(ledger)
        self.registries.append(registry)
        return ledger, spool

    async def close(self) -> None:
        for ledger in self.ledgers:
            await ledger.close()
        for s in self._stores:
            await s.close()
        for c in self._clients:
            await c.aclose()


@pytest.fixture
async def replicas(redis_client: aioredis.Redis, key_prefix: str) -> AsyncIterator[Replicas]:
    kwargs = redis_client.connection_pool.connection_kwargs
    r = Replicas(f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs['db']}", key_prefix)
    yield r
    await r.close()


async def _rows_in(database_url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(database_url)
    try:
        got = await conn.fetchrow(
            "SELECT count(*) AS n, coalesce(sum(cost_micro_usd), 0) AS cost FROM llmgw_spend"
        )
    finally:
        await conn.close()
    assert got is not None
    return int(got["n"]), int(got["cost"])


async def _count_is(database_url: str, n: int) -> bool:
    return (await _rows_in(database_url))[0] == n


async def _spool_empty(client: aioredis.Redis, key_prefix: str) -> bool:
    key = spool_key(key_prefix)
    pending = await client.xpending(key, GROUP)
    return int(await client.xlen(key)) == 0 and int(pending["pending"]) == 0


async def test_rows_recorded_by_two_replicas_land_once(
    replicas: Replicas, store: SpendStore, database_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    a, _ = await replicas.ledger(database_url)
    b, _ = await replicas.ledger(database_url)
    await a.start()
    await b.start()
    rng = random.Random(11)
    rows = [make_row(i, time.time(), rng) for i in range(4_000)]
    for i, row in enumerate(rows):
        (a if i % 2 else b).record(row)
        if i % 250 == 0:
            await asyncio.sleep(0.02)  # traffic over time: flushes and drains interleave with recording
    await wait_until_async(
        lambda: _count_is(database_url, len(rows)),
        lambda: f"{len(rows)} rows, {a.stats} {b.stats}",
        timeout=30,
    )
    await wait_until_async(lambda: _spool_empty(redis_client, key_prefix), "the spool to empty", timeout=10)
    await a.close()
    await b.close()
    assert await _rows_in(database_url) == (len(rows), sum(r.cost_micro_usd for r in rows))
    assert a.stats.spooled + b.stats.spooled == len(rows)
    assert a.stats.written + b.stats.written >= len(rows)
    assert a.stats.dropped == b.stats.dropped == 0
    for registry in replicas.registries:
        assert registry.get_sample_value("llmgw_ledger_rows_total", {"outcome": "dropped"}) == 0
    written = sum(
        r.get_sample_value("llmgw_ledger_rows_total", {"outcome": "written"}) or 0
        for r in replicas.registries
    )
    assert written >= len(rows)
    assert all(
        (r.get_sample_value("llmgw_ledger_last_write_timestamp_seconds") or 0) > 0
        for r in replicas.registries
    )


async def test_a_dead_replicas_pending_rows_are_claimed_by_another(
    replicas: Replicas, store: SpendStore, database_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    rng = random.Random(12)
    rows = [make_row(i, time.time(), rng) for i in range(300)]
    dead = RedisSpool(redis_client, key_prefix=key_prefix, consumer="dead-replica")
    assert await dead.append(rows) == 300
    taken = await dead.read(100)  # pending for the dead replica from now on
    assert len(taken) == 100
    # It had written half of its batch when it died, and acknowledged nothing.
    await store.write([e.row for e in taken[:50] if e.row is not None])

    live, _ = await replicas.ledger(database_url, claim_idle_ms=1_000, claim_every_s=0.2)
    await live.start()
    await wait_until_async(
        lambda: _count_is(database_url, 300), lambda: f"300 rows ({live.stats})", timeout=20
    )
    await wait_until_async(
        lambda: _spool_empty(redis_client, key_prefix), "the claimed entries acked", timeout=10
    )
    assert await _rows_in(database_url) == (300, sum(r.cost_micro_usd for r in rows))
    assert live.stats.dropped == 0


async def test_a_replica_closed_while_failing_leaves_its_batch_to_another(
    replicas: Replicas,
    store: SpendStore,
    database_url: str,
    postgres: PostgresServer,
    redis_client: aioredis.Redis,
    key_prefix: str,
) -> None:
    # Replica A writes to a database without the ledger's tables (no migrations): every write fails, so the
    # batch it read stays pending under its name when it shuts down.
    broken_db = postgres.create_database(f"broken_{key_prefix}")
    no_migrate = CONFIG.model_copy(update={"migrate_on_start": False})
    a, spool_a = await replicas.ledger(broken_db, no_migrate)
    await a.start()
    rng = random.Random(13)
    rows = [make_row(i, time.time(), rng) for i in range(250)]
    for row in rows:
        a.record(row)
    await wait_until_async(lambda: a.stats.write_errors > 0, "replica A's write to fail", timeout=10)
    await a.close()
    pending = await redis_client.xpending(spool_key(key_prefix), GROUP)
    assert int(pending["pending"]) > 0  # left behind, unacknowledged
    assert a.stats.spooled == 250 and a.stats.dropped == 0

    b, _ = await replicas.ledger(database_url, claim_idle_ms=1_000, claim_every_s=0.2)
    await b.start()
    await wait_until_async(lambda: _count_is(database_url, 250), lambda: f"250 rows ({b.stats})", timeout=20)
    await wait_until_async(lambda: _spool_empty(redis_client, key_prefix), "the spool to empty", timeout=10)
    assert await _rows_in(database_url) == (250, sum(r.cost_micro_usd for r in rows))
    assert b.stats.dropped == 0


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server binary not found on PATH")
async def test_rows_wait_in_memory_while_redis_is_down(
    store: SpendStore, database_url: str, key_prefix: str, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    replicas = Replicas(server.url, key_prefix)
    try:
        ledger, _ = await replicas.ledger(database_url)
        await ledger.start()
        rng = random.Random(14)
        rows = [make_row(i, time.time(), rng) for i in range(600)]
        for row in rows[:200]:
            ledger.record(row)
        await wait_until_async(lambda: _count_is(database_url, 200), "the first rows", timeout=10)
        server.kill()
        for row in rows[200:]:
            ledger.record(row)
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.5)  # several flushes fail meanwhile
        assert ledger.stats.buffered == 400  # kept in memory, none lost
        assert await _rows_in(database_url) == (200, sum(r.cost_micro_usd for r in rows[:200]))
        server.start()  # same port, empty (no persistence): the spool's group is made again
        await wait_until_async(
            lambda: _count_is(database_url, 600), lambda: f"600 rows ({ledger.stats})", timeout=30
        )
        assert await _rows_in(database_url) == (600, sum(r.cost_micro_usd for r in rows))
        assert ledger.stats.dropped == 0 and ledger.stats.buffered == 0
    finally:
        await replicas.close()
        server.kill()


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server binary not found on PATH")
async def test_the_spool_stops_short_of_redis_maxmemory(key_prefix: str, tmp_path: Path) -> None:
    # The limiter shares this Redis (maxmemory + noeviction in the chart): a spool that filled it would make
    # Redis refuse the limiter's writes too. The app's RedisRoom says when growth must stop; the spool obeys.
    server = RedisServer(tmp_path)
    server.start()
    client = aioredis.Redis.from_url(server.url, socket_timeout=0.5)
    try:
        used = int((await client.info("memory"))["used_memory"])
        await client.config_set("maxmemory", str(used + 4_000_000))
        await client.config_set("maxmemory-policy", "noeviction")
        room = RedisRoom(client, CollectorRegistry(), max_ratio=0.8)
        spool = RedisSpool(client, key_prefix=key_prefix, max_rows=10_000_000, room=lambda: room.room)
        rng = random.Random(15)
        payload = [make_row(i, time.time(), rng) for i in range(2_000)]
        appended = 0
        for _ in range(100):
            await room.read()  # the app reads it every second; here before every append
            n = await spool.append(payload)
            appended += n
            if n == 0:
                break
        assert 0 < appended < 100 * len(payload)  # it stopped
        info = await client.info("memory")
        assert int(info["used_memory"]) < int(info["maxmemory"])  # before Redis's OOM
        assert await client.set(f"{key_prefix}:limiter-like", "1")  # other writes still work
        assert await spool.length() == appended
    finally:
        await client.aclose()
        server.kill()


async def test_an_entry_that_is_not_a_spend_row_is_dropped_and_counted_once(
    replicas: Replicas, store: SpendStore, database_url: str, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # Something else wrote to the stream (an older version's format, a hand-made XADD): the rows around
    # it still land, the entry is acknowledged (never read again) and counted as dropped.
    rng = random.Random(16)
    rows = [make_row(i, time.time(), rng) for i in range(3)]
    key = spool_key(key_prefix)
    await redis_client.xadd(key, {b"r": rows[0].encode()})
    await redis_client.xadd(key, {b"r": b'[99, "from the future"]'})
    await redis_client.xadd(key, {b"r": rows[1].encode(), b"extra": b"x"})
    await redis_client.xadd(key, {b"r": rows[2].encode()})
    ledger, _ = await replicas.ledger(database_url)
    await ledger.start()
    await wait_until_async(lambda: _count_is(database_url, 3), lambda: f"3 rows, {ledger.stats}", timeout=15)
    await wait_until_async(lambda: _spool_empty(redis_client, key_prefix), "the spool to empty", timeout=10)
    assert ledger.stats.dropped == 1
    assert replicas.registries[0].get_sample_value("llmgw_ledger_rows_total", {"outcome": "dropped"}) == 1
    assert await _rows_in(database_url) == (3, sum(r.cost_micro_usd for r in rows))


async def test_a_batch_holding_one_request_twice_is_written_once(
    store: SpendStore, database_url: str
) -> None:
    # A pipeline cut after some XADDs is appended again: one batch can carry a request twice.
    rng = random.Random(17)
    rows = [make_row(i, time.time(), rng) for i in range(5)]
    await store.write([*rows, rows[1], rows[3]])
    await store.write(rows)  # and a batch written again changes nothing
    assert await _rows_in(database_url) == (5, sum(r.cost_micro_usd for r in rows))
