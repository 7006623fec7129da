"""A real redis-server on a free port (one per session, no persistence) and a clean client per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from tests.support.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()
