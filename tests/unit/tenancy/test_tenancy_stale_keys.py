"""Key store outages: known keys keep working from the stale cache for a bounded time, revoked keys stay
revoked, unknown keys get 503 (issue 24, item 4); revocations invalidate the cache at once (item 9)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.config import Tenancy, default_policy
from gateway.errors import AuthenticationError, UpstreamUnavailableError
from gateway.observability.metrics import Metrics
from gateway.tenancy.auth import PROBE_S, Authenticator
from gateway.tenancy.keys import KeyRecord, generate_key, hash_key
from tests.unit.tenancy.test_tenancy_auth import LIMITS, Clock, CountingStore, bearer, rec


class HangingStore(CountingStore):
    """A store whose lookups never answer (Redis stopped with SIGSTOP: the socket just stays silent)."""

    async def get(self, sha256: str) -> KeyRecord | None:
        self.gets += 1
        await asyncio.Event().wait()
        return None


def make(store: CountingStore, clock: Clock, **tenancy: object) -> tuple[Authenticator, Metrics]:
    metrics = Metrics(default_policy())
    auth = Authenticator(Tenancy(**tenancy), LIMITS, store, clock=clock, metrics=metrics)
    return auth, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_known_key_is_served_stale_for_the_stale_ttl(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth, metrics = make(store, clock, cache_ttl_s=1.0, stale_ttl_s=60.0)
    assert (await auth.authenticate(bearer(key), "small")).key_id == "k1"
    store.down = True
    clock.now += 30.0
    assert (await auth.authenticate(bearer(key), "small")).key_id == "k1"
    assert sample(metrics, "llmgw_auth_stale_keys_total") == 1
    assert sample(metrics, "llmgw_auth_key_store_degraded") == 1
    clock.now += 31.0  # 61 s after the last successful lookup: the stale entry is gone
    with pytest.raises(UpstreamUnavailableError) as ei:
        await auth.authenticate(bearer(key), "small")
    assert ei.value.status == 503 and ei.value.code == "key_store_unavailable"


async def test_unknown_key_during_an_outage_is_503_saying_why(store: CountingStore, clock: Clock) -> None:
    auth, _ = make(store, clock)
    store.down = True
    with pytest.raises(UpstreamUnavailableError) as ei:
        await auth.authenticate(bearer(generate_key()), "small")
    err = ei.value
    assert err.status == 503 and err.retryable and err.code == "key_store_unavailable"
    assert "cannot be told apart" in err.message
    assert set(err.payload()["error"]) == {"message", "type", "param", "code"}


async def test_revoked_key_stays_revoked_during_an_outage(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key, revoked_at=5.0))
    auth, metrics = make(store, clock, cache_ttl_s=1.0)
    with pytest.raises(AuthenticationError):
        await auth.authenticate(bearer(key), "small")
    store.down = True
    clock.now += 10.0
    with pytest.raises(AuthenticationError) as ei:
        await auth.authenticate(bearer(key), "small")
    assert ei.value.code == "api_key_revoked"
    assert sample(metrics, "llmgw_auth_stale_keys_total") == 0


async def test_stale_ttl_zero_disables_the_fallback(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth, _ = make(store, clock, cache_ttl_s=1.0, stale_ttl_s=0)
    await auth.authenticate(bearer(key), "small")
    store.down = True
    clock.now += 1.5
    with pytest.raises(UpstreamUnavailableError):
        await auth.authenticate(bearer(key), "small")


async def test_degraded_state_probes_once_per_interval_and_recovers(
    store: CountingStore, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth, metrics = make(store, clock, cache_ttl_s=1.0)
    await auth.authenticate(bearer(key), "small")
    store.down = True
    clock.now += 2.0
    caplog.set_level(logging.WARNING, logger="llmgw.auth")
    gets = store.gets
    for _ in range(20):  # within one probe interval: one request asks the store, the others do not
        await auth.authenticate(bearer(key), "small")
    assert store.gets == gets + 1
    assert sample(metrics, "llmgw_auth_stale_keys_total") == 20
    store.down = False
    clock.now += PROBE_S
    await auth.authenticate(bearer(key), "small")
    assert sample(metrics, "llmgw_auth_key_store_degraded") == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "llmgw.auth"]
    assert len(lines) == 2, lines
    assert "unavailable" in lines[0] and "available again" in lines[1]


async def test_a_hanging_store_times_out_into_the_stale_cache(clock: Clock) -> None:
    store = HangingStore()
    known = generate_key()
    auth, metrics = make(store, clock, cache_ttl_s=1.0, lookup_timeout_s=0.05)
    # Warm the cache through a store that answers, then make it hang.
    auth._remember(hash_key(known), auth._resolve(rec(known)), clock.now)
    clock.now += 2.0
    p = await asyncio.wait_for(auth.authenticate(bearer(known), "small"), 5.0)
    assert p.key_id == "k1" and sample(metrics, "llmgw_auth_key_store_degraded") == 1
    clock.now += PROBE_S
    with pytest.raises(UpstreamUnavailableError):
        await asyncio.wait_for(auth.authenticate(bearer(generate_key()), "small"), 5.0)


async def test_local_revocation_is_counted_and_survives_an_outage(store: CountingStore, clock: Clock) -> None:
    key = generate_key()
    await store.create(rec(key))
    auth, metrics = make(store, clock)
    await auth.authenticate(bearer(key), "small")
    assert await store.revoke("k1")
    assert sample(metrics, "llmgw_auth_key_invalidations_total", source="local") == 1
    store.down = True  # the revoked entry answers without the store
    clock.now += 10.0
    with pytest.raises(AuthenticationError) as ei:
        await auth.authenticate(bearer(key), "small")
    assert ei.value.code == "api_key_revoked"


async def test_broadcast_invalidation_of_an_unseen_key_counts_nothing(
    store: CountingStore, clock: Clock
) -> None:
    auth, metrics = make(store, clock)
    auth.invalidate(hash_key(generate_key()), "broadcast")
    assert sample(metrics, "llmgw_auth_key_invalidations_total", source="broadcast") == 0
