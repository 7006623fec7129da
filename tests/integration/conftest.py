"""One real redis-server per test session for the integration tests (limiter and key store)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.support.redis_server import REDIS_SERVER, RedisServer
from tests.support.stack import Stack


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server binary not found on PATH (apt install redis-server)")
    with Stack(tmp_path_factory.mktemp("redis")) as s:
        yield s.redis()


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A redis-py asyncio client on a database of its own (3), emptied for each test."""
    c = aioredis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/3", socket_timeout=0.5)
    await c.flushdb()
    yield c
    await c.aclose()
