"""Room for growth in a real redis-server with a small `maxmemory` (issue 39): once used memory passes
the share growth writers may use, delivered-answer records are dropped (and counted) instead of written,
so the limiter's headroom is never taken; below it they are written again."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from gateway.observability.feedback_shared import SharedFeedback
from gateway.observability.redis_room import RedisRoom, room_for


@pytest.mark.parametrize(
    ("used", "maxmemory", "room"),
    [(0, 0, True), (10**12, 0, True), (69, 100, True), (70, 100, False), (100, 100, False)],
)
def test_room_for(used: int, maxmemory: int, room: bool) -> None:
    assert room_for(used, maxmemory, 0.7) is room


async def test_growth_writers_hold_back_near_maxmemory(redis_client: aioredis.Redis) -> None:
    client = redis_client
    info = await client.info("memory")
    base = int(info["used_memory"])
    await client.config_set("maxmemory", str(base + 4 * 1024 * 1024))
    await client.config_set("maxmemory-policy", "noeviction")
    try:
        reg = CollectorRegistry()
        room = RedisRoom(client, reg, max_ratio=0.7)
        assert not room.room  # nothing read yet: hold back
        await room.read()
        assert room.room
        shared = SharedFeedback(client, 60.0, reg, "room:", room=lambda: room.room)
        written = 0
        for i in range(20_000):  # ~1 KB records, as routed answers leave them
            shared.publish("acme", f"r{i}", "p", 1.0, b"x" * 1000)
            if i % 500 == 499:
                await shared.flush()
                await room.read()
        written = len([k async for k in client.scan_iter("room:fb:*", count=1000)])
        info = await client.info("memory")
        used, maxmemory = int(info["used_memory"]), int(info["maxmemory"])
        assert not room.room
        assert used < maxmemory  # never full: the rest is the limiter's
        assert 0 < written < 20_000
        assert reg.get_sample_value("llmgw_feedback_dropped_records_total") == 20_000 - written
        assert reg.get_sample_value("llmgw_redis_growth_paused") == 1
        # The limiter's writes still fit.
        assert await client.set("{llmgw}:probe", b"y" * 1000)
        # Room again once memory is freed.
        await client.flushdb()
        await room.read()
        assert room.room and reg.get_sample_value("llmgw_redis_growth_paused") == 0
    finally:
        await client.config_set("maxmemory", "0")
        await client.flushdb()
