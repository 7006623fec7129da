"""The ledger's integration fixtures: one real PostgreSQL per session (initdb costs 2-4 s), a fresh database
per test, and rows made to order. Redis is the session's redis-server (tests/integration/conftest.py); each
test uses a key prefix of its own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.ledger.store import SpendStore
from tests.support.postgres import PostgresServer, start_or_skip


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    server = start_or_skip(tmp_path_factory.mktemp("postgres"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def database_url(postgres: PostgresServer) -> str:
    """A new, empty database on the session's server."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SpendStore]:
    """A store on a fresh database, migrated."""
    s = await SpendStore.connect(database_url)
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def key_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"
