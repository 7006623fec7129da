"""The authenticator: header parsing, errors in the OpenAI shape, caching, static keys, tenants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.config import AppConfig, OrgConfig, StaticKey, Tenancy
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    InternalError,
    PermissionDeniedError,
    UpstreamUnavailableError,
)
from gateway.tenancy.auth import Authenticator, Principal
from gateway.tenancy.keys import KeyRecord, MemoryKeyStore, generate_key, hash_key
from ratelimit.model import LevelLimits, LimitsConfig, TierLimits

LIMITS = LimitsConfig(
    tiers={
        "standard": TierLimits(key=LevelLimits(requests_per_min=60)),
        "premium": TierLimits(priority="premium", key=LevelLimits(requests_per_min=600)),
    }
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(MemoryKeyStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.down = False

    async def get(self, sha256: str) -> KeyRecord | None:
        self.gets += 1
        if self.down:
            raise UpstreamUnavailableError("key store unavailable")
        return await super().get(sha256)


def rec(key: str, key_id: str = "k1", **kw: object) -> KeyRecord:
    fields: dict[str, object] = dict(
        key_id=key_id,
        sha256=hash_key(key),
        org="acme",
        app="chat",
        tier="standard",
        models=frozenset(),
        limits=None,
        created_at=0.0,
        revoked_at=None,
        source="store",
    )
    fields.update(kw)
    return KeyRecord(**fields)  # type: ignore[arg-type]


def bearer(key: str) -> bytes:
    return f"Bearer {key}".encode()


def make_auth(store: CountingStore, clock: Clock, **tenancy: object) -> Authenticator:
    return Authenticator(Tenancy(**tenancy), LIMITS, store, clock=clock)


def assert_openai_error(exc: GatewayError, status: int, code: str) -> None:
    assert exc.status == status
    body = exc.payload()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


async def test_valid_key(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key))
    p = await make_auth(store, clock).authenticate(bearer(key), "small")
    assert isinstance(p, Principal) and p.key_id == "k1"
    assert (p.tenant.key_id, p.tenant.org, p.tenant.app, p.tenant.tier) == ("k1", "acme", "chat", "standard")


@pytest.mark.parametrize("header", [None, b"", b"Bearer", b"Bearer   ", b"Basic dXNlcjpwYXNz", b"sk-abc"])
async def test_missing_key_is_401(store: CountingStore, clock: Clock, header: bytes | None) -> None:
    with pytest.raises(AuthenticationError) as ei:
        await make_auth(store, clock).authenticate(header, "small")
    assert_openai_error(ei.value, 401, "missing_api_key")
    assert ei.value.type == "authentication_error"
    assert "didn't provide an API key" in ei.value.message
    assert store.gets == 0


async def test_unknown_key_is_401_with_masked_key(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    with pytest.raises(AuthenticationError) as ei:
        await make_auth(store, clock).authenticate(bearer(key), "small")
    assert_openai_error(ei.value, 401, "invalid_api_key")
    assert "Incorrect API key provided" in ei.value.message
    assert key not in ei.value.message and key[6:-4] not in ei.value.message
    assert key[-4:] in ei.value.message


async def test_scheme_is_case_insensitive_and_api_key_header_works(
    store: CountingStore, clock: Clock
) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth = make_auth(store, clock)
    assert (await auth.authenticate(f"bearer  {key} ".encode(), "small")).key_id == "k1"
    assert (await auth.authenticate(None, "small", api_key=key.encode())).key_id == "k1"


async def test_non_ascii_and_huge_tokens_are_incorrect_not_crashes(
    store: CountingStore, clock: Clock
) -> None:
    auth = make_auth(store, clock)
    with pytest.raises(AuthenticationError) as ei:
        await auth.authenticate("Bearer sk-é漢".encode(), "small")
    assert ei.value.code == "invalid_api_key"
    with pytest.raises(AuthenticationError):
        await auth.authenticate(b"Bearer sk-" + b"a" * 10_000, "small")
    assert store.gets == 1  # the huge one is not even looked up


async def test_wrong_model_is_403(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key, models=frozenset({"small"})))
    auth = make_auth(store, clock)
    assert (await auth.authenticate(bearer(key), "small")).key_id == "k1"
    with pytest.raises(PermissionDeniedError) as ei:
        await auth.authenticate(bearer(key), "large")
    assert_openai_error(ei.value, 403, "model_not_allowed")
    assert ei.value.param == "model" and "'large'" in ei.value.message and key not in ei.value.message


async def test_cache_hit_avoids_the_store(store: CountingStore, clock: Clock) -> None:
    key, bad = generate_key(), generate_key()
    await store.create(rec(key))
    auth = make_auth(store, clock)
    for _ in range(50):
        await auth.authenticate(bearer(key), "small")
    assert store.gets == 1
    for _ in range(50):  # negative results are cached too
        with pytest.raises(AuthenticationError):
            await auth.authenticate(bearer(bad), "small")
    assert store.gets == 2
    clock.now += 5.01
    await auth.authenticate(bearer(key), "small")
    assert store.gets == 3


async def test_revocation_through_the_store_takes_effect_at_once(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth = make_auth(store, clock, cache_ttl_s=2.0)
    await auth.authenticate(bearer(key), "small")
    assert await store.revoke("k1")  # the store tells the authenticator: no wait for the TTL
    with pytest.raises(AuthenticationError) as ei:
        await auth.authenticate(bearer(key), "small")
    assert_openai_error(ei.value, 401, "api_key_revoked")
    assert key not in ei.value.message


async def test_an_unheard_revocation_takes_effect_after_the_cache_ttl(
    store: CountingStore, clock: Clock
) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth = make_auth(store, clock, cache_ttl_s=2.0)
    await auth.authenticate(bearer(key), "small")
    # Revoked where this authenticator hears nothing (a replica that missed the broadcast): the TTL
    # is the fallback.
    store._by_hash[hash_key(key)] = replace(rec(key), revoked_at=1.0)
    clock.now += 1.9
    await auth.authenticate(bearer(key), "small")  # still cached
    clock.now += 0.2
    with pytest.raises(AuthenticationError) as ei:
        await auth.authenticate(bearer(key), "small")
    assert_openai_error(ei.value, 401, "api_key_revoked")


async def test_new_key_is_usable_after_negative_ttl(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    auth = make_auth(store, clock, cache_ttl_s=1.0)
    with pytest.raises(AuthenticationError):
        await auth.authenticate(bearer(key), "small")
    await store.create(rec(key))
    clock.now += 1.01
    assert (await auth.authenticate(bearer(key), "small")).key_id == "k1"


async def test_cache_is_bounded_lru(store: CountingStore, clock: Clock) -> None:
    keys = [generate_key() for _ in range(3)]
    for i, k in enumerate(keys):
        await store.create(rec(k, key_id=f"k{i}"))
    auth = Authenticator(Tenancy(), LIMITS, store, clock=clock, cache_size=2)
    for k in keys[:2]:
        await auth.authenticate(bearer(k), "small")
    await auth.authenticate(bearer(keys[0]), "small")  # k0 most recent
    await auth.authenticate(bearer(keys[2]), "small")  # evicts k1
    assert store.gets == 3
    await auth.authenticate(bearer(keys[0]), "small")
    assert store.gets == 3
    await auth.authenticate(bearer(keys[1]), "small")
    assert store.gets == 4
    # A flood of bad keys does not evict good entries.
    for _ in range(5):
        with pytest.raises(AuthenticationError):
            await auth.authenticate(bearer(generate_key()), "small")
    gets = store.gets
    await auth.authenticate(bearer(keys[1]), "small")
    assert store.gets == gets


async def test_static_config_keys_skip_the_store(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    static = StaticKey(
        id="ops", sha256=hash_key(key), org="o", app="a", tier="premium", models=frozenset({"large"})
    )
    auth = make_auth(store, clock, keys=[static])
    p = await auth.authenticate(bearer(key), "large")
    assert (p.key_id, p.tenant.org, p.tenant.priority) == ("ops", "o", "premium")
    with pytest.raises(PermissionDeniedError):
        await auth.authenticate(bearer(key), "small")
    store.down = True  # static keys keep working when the store is down
    await auth.authenticate(bearer(key), "large")
    assert store.gets == 0


async def test_store_down_is_503(store: CountingStore, clock: Clock) -> None:
    store.down = True
    with pytest.raises(UpstreamUnavailableError) as ei:
        await make_auth(store, clock).authenticate(bearer(generate_key()), "small")
    assert ei.value.status == 503 and ei.value.retryable


async def test_disabled_auth_is_anonymous(store: CountingStore, clock: Clock) -> None:
    auth = make_auth(store, clock, auth="disabled", anonymous_tier="premium")
    for header in (None, b"Bearer sk-whatever"):
        p = await auth.authenticate(header, "anything")
        assert p.key_id == "anonymous"
        t = p.tenant
        assert (t.key_id, t.org, t.app, t.tier, t.priority) == ("anonymous",) * 3 + ("premium", "premium")
    assert store.gets == 0


async def test_tenant_limits_assembly(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    key_limits = LevelLimits(requests_per_min=7)
    await store.create(rec(key, tier="premium", limits=key_limits))
    await store.create(rec(generate_key(), key_id="k2", org="other", app="x"))
    org_limits = LevelLimits(tokens_per_min=1000)
    app_limits = LevelLimits(concurrent=3)
    orgs = [
        OrgConfig(name="acme", limits=org_limits, apps=[AppConfig(name="chat", limits=app_limits)]),
        OrgConfig(name="solo"),
    ]
    auth = make_auth(store, clock, orgs=orgs)
    t = (await auth.authenticate(bearer(key), "small")).tenant
    assert t.tier == "premium" and t.priority == "premium"
    assert (t.key_limits, t.app_limits, t.org_limits) == (key_limits, app_limits, org_limits)
    # Overrides merge over the tier's defaults where the limiter resolves rules.
    assert LIMITS.tiers["premium"].key.merged(t.key_limits).requests_per_min == 7
    other = auth.tenant_for(rec("x", key_id="k2", org="other", app="x"))
    assert (other.priority, other.key_limits, other.app_limits, other.org_limits) == (
        "standard",
        None,
        None,
        None,
    )


async def test_key_whose_tier_was_removed_is_a_clear_500(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key, tier="gold"))
    with pytest.raises(InternalError) as ei:
        await make_auth(store, clock).authenticate(bearer(key), "small")
    assert "gold" in ei.value.message
