"""SpendStore on a real PostgreSQL: idempotent writes, migrations (again, concurrently, from two processes,
a changed file refused), retention (old rows only, bounded, one replica per period), the audit log."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from ledger_rows import make_row

from gateway.ledger.store import MigrationError, SpendStore, migrations
from tests.support.postgres import PostgresServer

ALL = [f"{m.version}_{m.name}" for m in migrations()]


async def _count(url: str, sql: str = "SELECT count(*) FROM llmgw_spend") -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def test_a_batch_written_twice_is_kept_once(store: SpendStore, database_url: str) -> None:
    rng = random.Random(1)
    rows = [make_row(i, time.time(), rng) for i in range(301)]
    await store.write(rows[:300])
    await store.write(rows[100:])  # a retried batch, with one new row
    assert await _count(database_url) == 301
    assert await _count(database_url, "SELECT sum(cost_micro_usd) FROM llmgw_spend") == sum(
        r.cost_micro_usd for r in rows
    )


async def test_a_row_reads_back_as_written(store: SpendStore, database_url: str) -> None:
    row = make_row(7, 1_796_670_630.25, random.Random(3))
    await store.write([row])
    conn = await asyncpg.connect(database_url)
    try:
        got = await conn.fetchrow("SELECT *, extract(epoch FROM at)::float8 AS epoch FROM llmgw_spend")
    finally:
        await conn.close()
    assert got is not None
    assert got["epoch"] == row.at
    for name in ("request_id", "org", "app", "key_id", "end_user", "alias", "pool", "adapter", "tier"):
        assert got[name] == getattr(row, name), name
    assert tuple(got["tags"]) == row.tags
    assert (got["tokens_in"], got["tokens_out"], got["tokens_cached"]) == (
        row.tokens_in,
        row.tokens_out,
        row.tokens_cached,
    )
    assert (got["cost_micro_usd"], got["status"], got["cache_hit"]) == (
        row.cost_micro_usd,
        row.status,
        row.cache_hit,
    )


async def test_migrate_applies_each_migration_once(database_url: str) -> None:
    store = await SpendStore.connect(database_url)
    try:
        assert await store.applied_migrations() == []
        assert await store.migrate() == ALL
        assert await store.migrate() == []
        assert await store.applied_migrations() == ALL
    finally:
        await store.close()


async def test_concurrent_migrations_do_not_conflict(database_url: str) -> None:
    # Four sessions at once (separate pools): the advisory lock makes one apply and the others find it done.
    stores = [await SpendStore.connect(database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(s.migrate() for s in stores))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    assert sorted(results, key=len) == [[], [], [], ALL]
    assert await _count(database_url, "SELECT count(*) FROM llmgw_schema_migrations") == len(ALL)


def test_two_migrating_processes_do_not_conflict(database_url: str, tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(database_url + "\n")  # as a Secret mounted as a file, written with echo
    env = {**os.environ, "LLMGW_DATABASE_URL_FILE": str(url_file)}
    env.pop("LLMGW_DATABASE_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "gateway", "db", "migrate", "--wait-s", "5"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    said = "".join(o for o, _ in outs)
    assert said.count("applied " + ", ".join(ALL)) == 1, said  # one applied them, the other found them
    assert "up to date" in said
    assert asyncio.run(_count(database_url, "SELECT count(*) FROM llmgw_schema_migrations")) == len(ALL)


async def test_a_migration_changed_after_it_was_applied_is_refused(
    store: SpendStore, database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE llmgw_schema_migrations SET sha256 = 'edited' WHERE version = '001'")
    finally:
        await conn.close()
    with pytest.raises(MigrationError, match="001_spend.sql changed after it was applied"):
        await store.migrate()


def test_migrate_cli_names_an_unreachable_database_without_its_password(postgres: PostgresServer) -> None:
    from tests.support.procs import free_port

    url = f"postgresql://llmgw:s3cret-pw@127.0.0.1:{free_port()}/ledger"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "db", "migrate", "--wait-s", "1.5"],
        env={**os.environ, "LLMGW_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "cannot reach postgresql://llmgw:***@127.0.0.1" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout
    assert time.monotonic() - started >= 1.0  # it waited


def test_cli_without_a_database_url_says_so() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMGW_DATABASE_URL")}
    for args in (["db", "migrate"], ["spend", "--from", "2026-11-01", "--to", "2026-12-01"]):
        proc = subprocess.run(
            [sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, proc.stderr
        assert "set LLMGW_DATABASE_URL" in proc.stderr


async def test_retention_deletes_old_rows_only_and_in_bounded_batches(
    store: SpendStore, database_url: str
) -> None:
    rng = random.Random(2)
    now = time.time()
    day = 86_400
    old = [make_row(i, now - 500 * day - i, rng, prefix="old") for i in range(30)]
    edge = [make_row(0, now - 399 * day, rng, prefix="keep")]  # inside 400 days: kept
    new = [make_row(i, now - i * 3600, rng, prefix="new") for i in range(20)]
    await store.write(old + edge + new)
    assert await store.delete_older_than(400, limit=12) == 12  # bounded
    assert await store.delete_older_than(400, limit=12) == 12
    assert await store.delete_older_than(400, limit=12) == 6
    assert await store.delete_older_than(400, limit=12) == 0
    conn = await asyncpg.connect(database_url)
    try:
        left = {r["request_id"] for r in await conn.fetch("SELECT request_id FROM llmgw_spend")}
    finally:
        await conn.close()
    assert left == {r.request_id for r in edge + new}


async def test_one_replica_takes_each_retention_turn(store: SpendStore, database_url: str) -> None:
    others = [await SpendStore.connect(database_url) for _ in range(3)]
    try:
        turns = await asyncio.gather(*(s.retention_turn(60) for s in [store, *others]))
        assert sorted(turns) == [False, False, False, True]
        assert not await store.retention_turn(60)  # the period has not passed
        await asyncio.sleep(1.1)
        turns = await asyncio.gather(*(s.retention_turn(1) for s in [store, *others]))
        assert sorted(turns) == [False, False, False, True]
    finally:
        await asyncio.gather(*(s.close() for s in others))


async def test_audit_entries_round_trip(store: SpendStore) -> None:
    before = {"tier": "standard", "limits": {"tokens_per_min": 1000}, "models": ["small"]}
    after = {
        "tier": "premium",
        "limits": {"tokens_per_min": 5000},
        "models": ["small", "large"],
        "note": "é ✓",
    }
    await store.audit("admin:alice", "key.update", "key:k1", before, after)
    await store.audit("admin:bob", "key.create", "key:k2", None, {"org": "acme"})
    await store.audit("admin:bob", "key.revoke", "key:k2", {"org": "acme"}, None)
    entries = await store.audit_entries()
    assert [(e["actor"], e["action"], e["target"]) for e in entries] == [
        ("admin:bob", "key.revoke", "key:k2"),
        ("admin:bob", "key.create", "key:k2"),
        ("admin:alice", "key.update", "key:k1"),
    ]
    assert entries[2]["before"] == before and entries[2]["after"] == after
    assert entries[1]["before"] is None and entries[0]["after"] is None
    assert entries[0]["id"] > entries[1]["id"] > entries[2]["id"]
    assert all(e["at"].tzinfo is not None for e in entries)
    assert len(await store.audit_entries(limit=2)) == 2
