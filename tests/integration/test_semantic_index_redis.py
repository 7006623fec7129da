"""RedisVectorIndex against a real Redis 7.4 + RediSearch (scripts/install-redis-stack), and its
`ensure()` against Debian's redis-server 7.0, which has no query engine."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from cache.semantic import RedisVectorIndex, Vector
from ratelimit.resp import RespClient
from tests.support.redis_server import RedisServer

DIM = 8


def at_cosine(c: float, axis: int = 0, other: int = 1) -> Vector:
    """A unit vector with cosine `c` to the basis vector `axis`."""
    v = np.zeros(DIM, dtype=np.float32)
    v[axis], v[other] = c, np.sqrt(1.0 - c * c)
    return v


@pytest.fixture(scope="module")
def stack_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-stack"), stack=True)
    server.start()
    yield server
    server.kill()


@pytest.fixture
async def client(stack_server: RedisServer) -> AsyncIterator[RespClient]:
    client = RespClient.from_url(stack_server.url, op_timeout_s=2.0)
    yield client
    await client.aclose()


@pytest.fixture
async def index(client: RespClient) -> RedisVectorIndex:
    """A fresh index and key prefix per test: tests share the server, never each other's entries."""
    name = uuid.uuid4().hex[:8]
    idx = RedisVectorIndex(client, index=f"t-{name}", prefix=f"t:{name}:".encode(), dim=DIM)
    assert await idx.ensure() is None
    return idx


async def test_ensure_creates_once_and_is_idempotent(client: RespClient) -> None:
    idx = RedisVectorIndex(client, index="t-ensure", prefix=b"t:ensure:", dim=DIM)
    assert await idx.ensure() is None
    assert b"t-ensure" in await client.execute("FT._LIST")
    assert await idx.ensure() is None  # exists: checked, not recreated
    assert await RedisVectorIndex(client, index="t-ensure", prefix=b"t:ensure:", dim=DIM).ensure() is None


async def test_ensure_reports_an_index_of_another_dimension(client: RespClient) -> None:
    assert await RedisVectorIndex(client, index="t-dim", prefix=b"t:dim:", dim=DIM).ensure() is None
    reason = await RedisVectorIndex(client, index="t-dim", prefix=b"t:dim:", dim=DIM * 2).ensure()
    assert reason is not None and "dim" in reason


async def test_hit_at_or_above_threshold_miss_below(index: RedisVectorIndex) -> None:
    await index.add(b"s", at_cosine(1.0), b"answer", ttl_s=60)
    hit = await index.search(b"s", at_cosine(0.95), min_similarity=0.95 - 1e-5)
    assert hit is not None
    assert hit[0] == b"answer"
    assert hit[1] == pytest.approx(0.95, abs=1e-4)
    assert await index.search(b"s", at_cosine(0.94), min_similarity=0.95) is None


async def test_best_entry_wins_and_values_are_binary_safe(index: RedisVectorIndex) -> None:
    blob = bytes(range(256)) * 8
    await index.add(b"s", at_cosine(0.90), b"far", ttl_s=60)
    await index.add(b"s", at_cosine(0.99), blob, ttl_s=60)
    await index.add(b"s", at_cosine(0.0, axis=2), b"orthogonal", ttl_s=60)
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == blob
    assert hit[1] == pytest.approx(0.99, abs=1e-4)


async def test_scope_isolation(index: RedisVectorIndex) -> None:
    v = at_cosine(1.0)
    # Scopes are arbitrary bytes, including ones that would need escaping in a TAG query.
    scope_a, scope_b = b"tenant-a|m|{sys} @x", b"tenant-b|m|{sys} @x"
    await index.add(scope_a, v, b"a's answer", ttl_s=60)
    assert await index.search(scope_b, v, min_similarity=-1.0) is None
    assert await index.search(scope_a + b"!", v, min_similarity=-1.0) is None
    await index.add(scope_b, v, b"b's answer", ttl_s=60)
    hit_a = await index.search(scope_a, v, min_similarity=0.99)
    hit_b = await index.search(scope_b, v, min_similarity=0.99)
    assert hit_a is not None and hit_a[0] == b"a's answer"
    assert hit_b is not None and hit_b[0] == b"b's answer"


async def test_ttl_expiry(index: RedisVectorIndex, client: RespClient) -> None:
    await index.add(b"s", at_cosine(1.0), b"short", ttl_s=1)
    await index.add(b"s", at_cosine(0.9), b"long", ttl_s=60)
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == b"short"
    await asyncio.sleep(1.2)
    hit = await index.search(b"s", at_cosine(1.0), min_similarity=0.5)
    assert hit is not None and hit[0] == b"long"


async def test_entries_are_keys_with_a_ttl_and_duplicates_overwrite(client: RespClient) -> None:
    idx = RedisVectorIndex(client, index="t-keys", prefix=b"t:keys:", dim=DIM)
    assert await idx.ensure() is None
    await idx.add(b"s", at_cosine(1.0), b"old", ttl_s=100)
    await idx.add(b"s", 3.0 * at_cosine(1.0), b"new", ttl_s=100)  # same direction, same entry
    keys = await client.execute("KEYS", "t:keys:*")
    assert len(keys) == 1 and keys[0].startswith(b"t:keys:" + b"s".hex().encode() + b":")
    assert 0 < await client.execute("TTL", keys[0]) <= 100
    hit = await idx.search(b"s", at_cosine(1.0), min_similarity=0.99)
    assert hit is not None and hit[0] == b"new"


async def test_ensure_without_query_engine_returns_a_reason(redis_server: RedisServer) -> None:
    """Debian's redis-server 7.0 (the session fixture) has no FT.* commands."""
    client = RespClient.from_url(redis_server.url)
    try:
        reason = await RedisVectorIndex(client).ensure()
        assert reason is not None and "query engine" in reason
        assert await client.execute("PING") == b"PONG"
    finally:
        await client.aclose()
