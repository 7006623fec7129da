"""Key format, hashing, masking, records and the in-memory store."""

from __future__ import annotations

import hashlib
import re

import pytest

from gateway.config import StaticKey, Tenancy
from gateway.tenancy.keys import (
    DuplicateKeyError,
    KeyRecord,
    MemoryKeyStore,
    generate_key,
    hash_key,
    mask_key,
    static_records,
)
from ratelimit.model import LevelLimits


def record(key_id: str = "k1", key: str = "sk-test-1", **kw: object) -> KeyRecord:
    fields: dict[str, object] = {
        "key_id": key_id,
        "sha256": hash_key(key),
        "org": "acme",
        "app": "chat",
        "tier": "standard",
        "models": frozenset(),
        "limits": None,
        "created_at": 1.0,
        "revoked_at": None,
        "source": "store",
    }
    fields.update(kw)
    return KeyRecord(**fields)  # type: ignore[arg-type]


def test_generated_keys_have_the_format_and_256_bits() -> None:
    keys = {generate_key() for _ in range(200)}
    assert len(keys) == 200
    for k in keys:
        assert re.fullmatch(r"sk-[A-Za-z0-9_-]{43}", k), k  # 43 urlsafe chars = 32 bytes


def test_hash_is_hex_sha256_of_the_whole_key() -> None:
    key = "sk-abc"
    assert hash_key(key) == hashlib.sha256(b"sk-abc").hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", hash_key(generate_key()))
    assert hash_key("sk-abc") != hash_key("sk-abd")


def test_mask_never_shows_the_key() -> None:
    key = generate_key()
    masked = mask_key(key)
    assert masked.startswith("sk-") and masked.endswith(key[-4:])
    assert len(masked.replace(".", "")) <= 10
    assert mask_key("short") == "*****"
    assert "secretval" not in mask_key("secretvalue1")


def test_record_json_round_trip_keeps_partial_limits() -> None:
    limits = LevelLimits(requests_per_min=5, shadow=frozenset({"requests_per_min"}))
    r = record(models=frozenset({"small", "large"}), limits=limits, revoked_at=3.5)
    back = KeyRecord.from_json(r.to_json())
    assert back == r
    assert back.limits is not None and back.limits.model_fields_set == {"requests_per_min", "shadow"}
    # A partial override must not reset what the tier sets.
    assert LevelLimits(tokens_per_min=100).merged(back.limits).tokens_per_min == 100


def test_record_pools_round_trip_and_older_records_allow_every_pool() -> None:
    r = record(pools=frozenset({"small"}))
    assert KeyRecord.from_json(r.to_json()) == r
    old = r.to_dict()
    del old["pools"]  # a record written before keys had pools
    assert KeyRecord.from_dict(old).pools == frozenset()


def test_static_records_come_from_the_policy() -> None:
    tenancy = Tenancy(
        keys=[StaticKey(id="ops", sha256=hash_key("sk-ops"), org="o", app="a", models=frozenset({"small"}))]
    )
    (r,) = static_records(tenancy)
    assert (r.key_id, r.sha256, r.source, r.models, r.revoked) == (
        "ops",
        hash_key("sk-ops"),
        "config",
        frozenset({"small"}),
        False,
    )


async def test_memory_store_create_get_list_revoke() -> None:
    store = MemoryKeyStore(clock=lambda: 42.0)
    r = record()
    await store.create(r)
    assert await store.get(r.sha256) == r
    assert await store.get(hash_key("sk-other")) is None
    with pytest.raises(DuplicateKeyError):
        await store.create(record(key="sk-different"))  # same id
    with pytest.raises(DuplicateKeyError):
        await store.create(record(key_id="k2"))  # same hash
    assert await store.list() == [r]
    assert await store.revoke("k1") is True
    got = await store.get(r.sha256)
    assert got is not None and got.revoked_at == 42.0
    assert await store.revoke("k1") is True  # idempotent, keeps the first time
    assert await store.revoke("nope") is False
    await store.close()
