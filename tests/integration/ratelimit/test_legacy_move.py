"""The upgrade to one key prefix keeps every tenant's usage (real redis-server).

Before 0.3 the limiter's keys were `{P}:...`; now they are `P:{P}:...` (`ratelimit.keys`). The layout
of each key is unchanged, so a pre-0.3 Redis is made here by renaming what this version wrote back to
the old names. Without the move a tenant's day quota would start again at zero after the upgrade.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from ratelimit.keys import legacy_root, root
from ratelimit.legacy import move_legacy_counters
from ratelimit.model import Admission, Dimension, Level, Rule
from ratelimit.redis_backend import RedisBackend
from ratelimit.rules import request_cost, usage_cost
from tests.support.redis_server import RedisServer

P = "up"
RULES = (
    Rule(Level.ORG, "acme", Dimension.TOKENS_DAY, 1000),
    Rule(Level.ORG, "acme", Dimension.TOKENS, 1000),
)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_server.url)
    await c.flushdb()
    yield c
    await c.aclose()


async def _spend(backend: RedisBackend, rid: str, tokens: int) -> None:
    decision = await backend.admit(Admission(rid, RULES, request_cost(tokens // 2, tokens - tokens // 2)))
    assert decision.allowed and decision.reservation is not None
    await backend.settle(decision.reservation, usage_cost(tokens // 2, tokens - tokens // 2))


async def _to_legacy_names(client: aioredis.Redis) -> list[bytes]:
    """What a pre-0.3 gateway would have left: the settled counters under `{P}:` (leases stay)."""
    moved = []
    async for name in client.scan_iter(match=f"{root(P)}:*"):
        if not name.endswith((b":leases", b":lh")):
            legacy = legacy_root(P).encode() + name[len(root(P)) :]
            await client.rename(name, legacy)
            moved.append(legacy)
    return moved


async def _counters(client: aioredis.Redis) -> dict[str, int]:
    """Quota counter and minute-window total of the org's rules, under the current names."""
    out: dict[str, int] = {}
    async for name in client.scan_iter(match=f"{root(P)}:org:acme:*"):
        text = name.decode()
        if text.endswith(":sw"):
            window = {k.decode(): int(v) for k, v in (await client.hgetall(name)).items()}
            subs = sum(v for k, v in window.items() if k not in ("t", "h"))
            assert window["t"] == subs, window  # lib_v4's invariant survives the merge
            out[text] = window["t"]
        elif ":q:" in text:
            out[text] = int(await client.get(name) or 0)
    return out


async def test_usage_survives_the_rename_and_adds_to_what_new_replicas_settled(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    backend = RedisBackend.from_url(redis_server.url, lease_s=30, key_prefix=P)
    await backend.load()
    await _spend(backend, "old-1", 300)
    await _spend(backend, "old-2", 300)
    before = await _counters(client)
    assert sorted(before.values()) == [600, 600]
    legacy = await _to_legacy_names(client)
    assert len(legacy) == 2
    # A replica of the new version settles while the old names still hold the day's usage: it would
    # see 0 used and admit far past the quota if nothing moved.
    await _spend(backend, "new-1", 100)
    assert sorted((await _counters(client)).values()) == [100, 100]

    moved = await move_legacy_counters(client, P)
    assert (moved.quota, moved.windows) == (1, 1)
    after = await _counters(client)
    assert after == {k: v + 100 for k, v in before.items()}
    assert [k async for k in client.scan_iter(match=f"{legacy_root(P)}:org:*")] == []
    for name in after:
        assert await client.pttl(name) > 0  # still expires by itself
    # The budget holds: 700 of 1000 used, so 400 more is refused and 300 is admitted.
    refused = await backend.admit(Admission("after-1", RULES, request_cost(200, 200)))
    assert not refused.allowed
    admitted = await backend.admit(Admission("after-2", RULES, request_cost(150, 150)))
    assert admitted.allowed
    # Idempotent: a second replica starting later finds nothing to move.
    again = await move_legacy_counters(client, P)
    assert (again.quota, again.windows) == (0, 0)
    await backend.close()


async def test_only_the_limiters_legacy_counters_are_touched(client: aioredis.Redis) -> None:
    await client.set(f"{legacy_root(P)}:leases", b"x")  # an old replica's live leases: left to expire
    await client.set(f"{legacy_root('other')}:org:a:tokens_day:q:d1", b"5")  # another prefix
    await client.set(f"{legacy_root(P)}x:org:a:tokens_day:q:d1", b"5")  # not under the root
    moved = await move_legacy_counters(client, P)
    assert (moved.quota, moved.windows) == (0, 0)
    assert await client.dbsize() == 3
