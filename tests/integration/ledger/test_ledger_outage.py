"""PostgreSQL goes away while two replicas keep recording: the rows wait in the Redis spool, and every one of
them is in PostgreSQL once it is back (nothing dropped). A PostgreSQL server of this module's own, since
the tests stop and kill it."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator

import asyncpg
import pytest
import redis.asyncio as aioredis
from ledger_rows import make_row
from prometheus_client import CollectorRegistry

from gateway.ledger.config import LedgerConfig
from gateway.ledger.model import SpendRow
from gateway.ledger.spool import RedisSpool
from gateway.ledger.store import SpendStore, migrations
from gateway.ledger.writer import Ledger
from tests.support.poll import wait_until, wait_until_async
from tests.support.postgres import PostgresServer, start_or_skip

CONFIG = LedgerConfig(enabled=True, flush_ms=50, batch_rows=200, memory_rows=20_000, spool_max_rows=500_000)
RATE = 250  # rows a second, over both replicas


@pytest.fixture(scope="module")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    server = start_or_skip(tmp_path_factory.mktemp("postgres-outage"))
    try:
        yield server
    finally:
        server.close()


async def _count(url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(url, timeout=2)
    try:
        got = await conn.fetchrow(
            "SELECT count(*) AS n, coalesce(sum(cost_micro_usd), 0) AS c FROM llmgw_spend"
        )
    finally:
        await conn.close()
    assert got is not None
    return int(got["n"]), int(got["c"])


async def _record_for(
    ledgers: list[Ledger], rows: list[SpendRow], seconds: float, rng: random.Random
) -> None:
    """Record RATE rows a second, alternating replicas, for `seconds`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    i = 0
    while loop.time() - start < seconds:
        for _ in range(RATE // 20):
            row = make_row(len(rows), time.time(), rng)
            rows.append(row)
            ledgers[i % len(ledgers)].record(row)
            i += 1
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(("how", "outage_s"), [("stop", 20.0), ("kill", 4.0)])
async def test_every_row_survives_a_postgres_outage(
    own_postgres: PostgresServer, redis_client: aioredis.Redis, key_prefix: str, how: str, outage_s: float
) -> None:
    url = own_postgres.create_database(f"ledger_{how}")
    stores = [await SpendStore.connect(url, connect_timeout_s=1.0) for _ in range(2)]
    spools = [
        RedisSpool(redis_client, key_prefix=key_prefix, max_rows=CONFIG.spool_max_rows) for _ in range(2)
    ]
    ledgers = [
        Ledger(CONFIG, spool, s, CollectorRegistry(), key_prefix)
        for spool, s in zip(spools, stores, strict=True)
    ]
    rng = random.Random(21)
    rows: list[SpendRow] = []
    try:
        for ledger in ledgers:
            await ledger.start()
        await _record_for(ledgers, rows, 1.0, rng)
        await wait_until_async(lambda: _first_is(url, len(rows)), "the rows before the outage", timeout=15)

        if how == "stop":
            own_postgres.stop()
        else:
            own_postgres.kill()
        before = len(rows)
        await _record_for(ledgers, rows, outage_s, rng)
        backlog = await spools[0].length()
        # Waiting in the spool (XLEN counts the batches the drainers hold too), not in memory.
        assert backlog >= len(rows) - before - sum(lg.stats.buffered for lg in ledgers) > 0
        assert sum(lg.stats.write_errors for lg in ledgers) > 0
        own_postgres.start()

        await wait_until_async(
            lambda: _first_is(url, len(rows)),
            lambda: f"{len(rows)} rows in PostgreSQL ({[lg.stats for lg in ledgers]})",
            timeout=60,
        )
        await wait_until_async(lambda: _spool_is_empty(spools[0]), "the spool to empty", timeout=15)
    finally:
        for ledger in ledgers:
            await ledger.close()
        for s in stores:
            await s.close()
    assert len(rows) >= RATE * outage_s * 0.8
    assert await _count(url) == (len(rows), sum(r.cost_micro_usd for r in rows))
    assert [lg.stats.dropped for lg in ledgers] == [0, 0]
    assert sum(lg.stats.spooled for lg in ledgers) == len(rows)


async def _first_is(url: str, n: int) -> bool:
    return (await _count(url))[0] == n


async def _spool_is_empty(spool: RedisSpool) -> bool:
    return await spool.length() == 0


def test_migrate_waits_for_a_database_that_starts_later(own_postgres: PostgresServer) -> None:
    url = own_postgres.create_database("ledger_wait")
    own_postgres.stop()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "db", "migrate", "--wait-s", "30"],
        env={**os.environ, "LLMGW_DATABASE_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2.0)
        assert proc.poll() is None  # still waiting
        own_postgres.start()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "applied " + ", ".join(f"{m.version}_{m.name}" for m in migrations()) in out
    wait_until(lambda: "llmgw_spend" in own_postgres.psql("\\dt", "ledger_wait"), "the table", timeout=5)
