"""Revocations reach every replica through Redis pub/sub (issue 24, item 9), against a real redis-server:
the revoking replica refuses the key at once, another replica as soon as the message arrives (its cache
TTL is 5 s here, so a refusal before that is the broadcast's doing), and the subscriber comes back after
its connection is killed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from gateway.config import Tenancy, default_policy
from gateway.errors import AuthenticationError
from gateway.observability.metrics import Metrics
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import KeyRecord, RedisKeyStore, generate_key, hash_key
from gateway.tenancy.revocations import BACKOFF_S
from ratelimit.model import LimitsConfig
from tests.support.poll import wait_until_async


def rec(key: str, key_id: str) -> KeyRecord:
    return KeyRecord(key_id, hash_key(key), "acme", "chat", "standard", frozenset(), None, 1.0, None, "store")


class Replica:
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.store = RedisKeyStore(client, "llmgw")
        self.metrics = Metrics(default_policy())
        self.auth = Authenticator(Tenancy(cache_ttl_s=5.0), LimitsConfig(), self.store, metrics=self.metrics)

    def invalidations(self, source: str) -> float:
        return (
            self.metrics.registry.get_sample_value("llmgw_auth_key_invalidations_total", {"source": source})
            or 0
        )


@pytest.fixture
async def replicas(
    redis_client: redis.asyncio.Redis, redis_url: str
) -> AsyncIterator[tuple[Replica, Replica]]:
    other = redis.asyncio.Redis.from_url(redis_url, socket_timeout=0.25)
    a, b = Replica(redis_client), Replica(other)
    for r in (a, b):
        await r.store.start()
        await asyncio.wait_for(r.store.revocations.subscribed.wait(), 5)
    try:
        yield a, b
    finally:
        for r in (a, b):
            await r.store.close()
        await other.aclose()


async def refused(auth: Authenticator, header: bytes) -> bool:
    try:
        await auth.authenticate(header, "small")
    except AuthenticationError as exc:
        return exc.code == "api_key_revoked"
    return False


async def wait_refused(auth: Authenticator, header: bytes, timeout: float = 3.0) -> None:
    await wait_until_async(
        lambda: refused(auth, header), "the key refused as revoked", timeout=timeout, interval=0.01
    )


async def test_revocation_reaches_the_other_replica_through_the_broadcast(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    key = generate_key()
    await a.store.create(rec(key, "k1"))
    header = f"Bearer {key}".encode()
    for r in (a, b):  # both caches warm: without the broadcast, B would accept the key for 5 s
        assert (await r.auth.authenticate(header, "small")).key_id == "k1"
    assert await a.store.revoke("k1")
    assert await refused(a.auth, header)  # the revoking replica: at once, no message needed
    await wait_refused(b.auth, header)
    assert a.invalidations("local") == 1 and a.invalidations("broadcast") == 0  # its own message skipped
    assert b.invalidations("broadcast") == 1 and b.invalidations("local") == 0


async def test_subscriber_comes_back_after_its_connection_is_killed(
    replicas: tuple[Replica, Replica], redis_client: redis.asyncio.Redis
) -> None:
    a, b = replicas
    await redis_client.client_kill_filter(_type="pubsub")
    channel = b.store.revocations
    # Killed, then subscribed again after the first backoff.
    await asyncio.sleep(BACKOFF_S[0] * 3)
    await asyncio.wait_for(channel.subscribed.wait(), 5)
    subs = await redis_client.pubsub_numsub(channel.channel)
    assert subs[0][1] == 2, subs
    key = generate_key()
    await a.store.create(rec(key, "k2"))
    header = f"Bearer {key}".encode()
    await b.auth.authenticate(header, "small")
    assert await a.store.revoke("k2")
    await wait_refused(b.auth, header)
