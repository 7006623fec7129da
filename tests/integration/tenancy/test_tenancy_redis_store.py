"""RedisKeyStore against a real redis-server: CRUD, no plaintext anywhere, revocation across replicas."""

from __future__ import annotations

import pytest
import redis.asyncio

from gateway.config import Tenancy
from gateway.errors import AuthenticationError, UpstreamUnavailableError
from gateway.tenancy.auth import Authenticator
from gateway.tenancy.keys import DuplicateKeyError, KeyRecord, RedisKeyStore, generate_key, hash_key
from ratelimit.model import LevelLimits, LimitsConfig


def rec(key: str, key_id: str, **kw: object) -> KeyRecord:
    fields: dict[str, object] = dict(
        key_id=key_id,
        sha256=hash_key(key),
        org="acme",
        app="chat",
        tier="standard",
        models=frozenset({"small"}),
        limits=LevelLimits(tokens_per_min=500),
        created_at=1.0,
        revoked_at=None,
        source="store",
    )
    fields.update(kw)
    return KeyRecord(**fields)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_create_get_list_revoke(redis_client: redis.asyncio.Redis) -> None:
    store = RedisKeyStore(redis_client, "llmgw")
    assert store.redis_keys == ("llmgw:{llmgw}:keys", "llmgw:{llmgw}:keyids")
    k1, k2 = generate_key(), generate_key()
    r1, r2 = rec(k1, "k1"), rec(k2, "k2", models=frozenset(), limits=None)
    await store.create(r1)
    await store.create(r2)
    assert await store.get(hash_key(k1)) == r1
    assert await store.get(hash_key(generate_key())) is None
    with pytest.raises(DuplicateKeyError):
        await store.create(rec(generate_key(), "k1"))
    with pytest.raises(DuplicateKeyError):
        await store.create(rec(k1, "k3"))
    assert sorted(await store.list(), key=lambda r: r.key_id) == [r1, r2]
    assert await store.revoke("k1") is True
    revoked = await store.get(hash_key(k1))
    assert revoked is not None and revoked.revoked_at is not None
    assert await store.revoke("k1") is True
    again = await store.get(hash_key(k1))
    assert again is not None and again.revoked_at == revoked.revoked_at
    assert await store.revoke("missing") is False
    await store.close()
    assert await redis_client.ping()  # a shared client stays open


async def test_prefixes_are_isolated(redis_client: redis.asyncio.Redis) -> None:
    a, b = RedisKeyStore(redis_client, "a"), RedisKeyStore(redis_client, "b")
    key = generate_key()
    await a.create(rec(key, "k1"))
    assert await b.get(hash_key(key)) is None
    await b.create(rec(key, "k1"))  # the same id in another prefix is fine


async def test_keys_of_a_pre_0_3_store_are_merged_at_start(redis_client: redis.asyncio.Redis) -> None:
    """The upgrade to one key prefix (`{P}:keys` -> `P:{P}:keys`) loses no key: the old hashes are
    merged at start, field by field (batches smaller than the store here), and a revocation made on an
    old replica after a new one copied the record still wins."""
    old = RedisKeyStore(redis_client, "llmgw")
    keys = [generate_key() for _ in range(7)]
    for i, k in enumerate(keys):
        await old.create(rec(k, f"k{i}"))
    for name in old.redis_keys:  # what a pre-0.3 gateway left (the layout is the same)
        await redis_client.rename(name, name.replace("llmgw:{llmgw}", "{llmgw}"))
    # k0 was copied by a new replica already, then revoked on an old one.
    revoked = (await redis_client.hget("{llmgw}:keys", hash_key(keys[0])), rec(keys[0], "k0", revoked_at=5.0))
    assert revoked[0] is not None
    await redis_client.hset("llmgw:{llmgw}:keys", hash_key(keys[0]), revoked[0])
    await redis_client.hset("{llmgw}:keys", hash_key(keys[0]), revoked[1].to_json())

    new = RedisKeyStore(redis_client, "llmgw")
    assert await new.get(hash_key(keys[1])) is None  # before start: the old hashes are not read
    assert await new.merge_legacy(batch=3) == 14  # 7 records (k0 replaced by its revoked one), 7 ids
    for i, k in enumerate(keys):
        got = await new.get(hash_key(k))
        assert got is not None and got.key_id == f"k{i}"
    k0 = await new.get(hash_key(keys[0]))
    assert k0 is not None and k0.revoked_at == 5.0
    assert await new.revoke("k3") is True  # the ids moved too
    names = sorted([n async for n in redis_client.scan_iter(count=100)])
    assert names == [b"llmgw:{llmgw}:keyids", b"llmgw:{llmgw}:keys"]
    assert await new.merge_legacy() == 0  # idempotent
    await new.close()


async def test_redis_holds_no_plaintext_key(redis_client: redis.asyncio.Redis) -> None:
    store = RedisKeyStore(redis_client, "llmgw")
    keys = [generate_key() for _ in range(20)]
    for i, k in enumerate(keys):
        await store.create(rec(k, f"k{i}"))
    await store.revoke("k3")
    parts: list[bytes | str] = []
    names = [name async for name in redis_client.scan_iter(count=100)]
    assert sorted(names) == [b"llmgw:{llmgw}:keyids", b"llmgw:{llmgw}:keys"]
    for name in names:
        serialized = await redis_client.dump(name)  # the serialized value, as a backup would hold it
        assert serialized is not None
        parts += [name, serialized]
        for field, value in (await redis_client.hgetall(name)).items():
            parts += [field, value]
    dump = b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)
    for k in keys:
        assert k.encode() not in dump
        assert k[3:].encode() not in dump  # not even without the prefix
        assert hash_key(k).encode() in dump  # while the hashes are there: the dump is not empty


async def test_revocation_reaches_another_replica_within_the_ttl(
    redis_client: redis.asyncio.Redis, redis_url: str
) -> None:
    limits = LimitsConfig()
    tenancy = Tenancy(cache_ttl_s=5.0)
    other_client = redis.asyncio.Redis.from_url(redis_url)
    clock_a, clock_b = Clock(), Clock()
    replica_a = Authenticator(tenancy, limits, RedisKeyStore(redis_client, "llmgw"), clock=clock_a)
    replica_b = Authenticator(tenancy, limits, RedisKeyStore(other_client, "llmgw"), clock=clock_b)
    try:
        key = generate_key()
        await RedisKeyStore(redis_client, "llmgw").create(rec(key, "k1"))
        header = f"Bearer {key}".encode()
        assert (await replica_a.authenticate(header, "small")).key_id == "k1"
        assert (await replica_b.authenticate(header, "small")).key_id == "k1"
        assert await RedisKeyStore(redis_client, "llmgw").revoke("k1")
        clock_b.now += 4.9
        await replica_b.authenticate(header, "small")  # cached within the TTL
        clock_b.now += 0.2  # 5.1 s after its lookup: replica B now refuses it
        with pytest.raises(AuthenticationError) as ei:
            await replica_b.authenticate(header, "small")
        assert ei.value.status == 401 and key not in ei.value.message
    finally:
        await other_client.aclose()


async def test_redis_down_is_503(redis_url: str) -> None:
    # A port nothing listens on: the store must say "unavailable", not leak a redis exception type.
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    store = RedisKeyStore(client, "llmgw", owns_client=True)
    auth = Authenticator(Tenancy(), LimitsConfig(), store)
    with pytest.raises(UpstreamUnavailableError) as ei:
        await auth.authenticate(f"Bearer {generate_key()}".encode(), "small")
    assert ei.value.status == 503 and ei.value.code == "key_store_unavailable"
    assert "cannot be told apart" in ei.value.message  # an unknown key: no stale entry to answer from
    for call in (store.list(), store.revoke("k"), store.create(rec(generate_key(), "k"))):
        with pytest.raises(UpstreamUnavailableError):
            await call
    await store.close()
