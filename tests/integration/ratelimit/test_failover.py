"""FailoverLimiter against a real redis-server that is killed and restarted mid-test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis

from ratelimit.errors import BackendUnavailable
from ratelimit.failover import FailoverLimiter
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Admission, Dimension, Level, Rule
from ratelimit.redis_backend import RedisBackend
from ratelimit.rules import request_cost, usage_cost
from tests.support.redis_server import REDIS_SERVER, RedisServer

RULES = (Rule(Level.ORG, "acme", Dimension.TOKENS, 100),)
PROBE_S = 0.2


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server binary not found on PATH (apt install redis-server)")
    srv = RedisServer(tmp_path)  # its own server: these tests kill it
    srv.start()
    yield srv
    srv.kill()


async def make(server: RedisServer, mode: str) -> FailoverLimiter:
    primary = RedisBackend.from_url(server.url, lease_s=30, key_prefix="fo")
    await primary.load()
    return FailoverLimiter(
        primary,
        MemoryBackend(lease_s=30),
        mode,  # type: ignore[arg-type]
        probe_interval_s=PROBE_S,
        settle_retries=3,
        settle_backoff_s=0.1,
    )


@pytest.fixture
async def fail_open(server: RedisServer) -> AsyncIterator[FailoverLimiter]:
    limiter = await make(server, "fail_open")
    yield limiter
    await limiter.close()


@pytest.fixture
async def fail_closed(server: RedisServer) -> AsyncIterator[FailoverLimiter]:
    limiter = await make(server, "fail_closed")
    yield limiter
    await limiter.close()


def adm(n: int, tokens: int) -> Admission:
    return Admission(f"fo-{n}-{time.monotonic_ns()}", RULES, request_cost(tokens, 0))


async def test_fail_open_decides_locally_then_recovers_exact_limiting(
    fail_open: FailoverLimiter, server: RedisServer
) -> None:
    lim = fail_open
    shared = await lim.admit(adm(1, 60))
    assert shared.allowed and not shared.degraded
    server.kill()
    local = await lim.admit(adm(2, 60))
    assert local.allowed and local.degraded  # the local limiter starts empty
    refused = await lim.admit(adm(3, 60))
    assert not refused.allowed and refused.degraded  # ... but it does limit: 60 + 60 > 100
    assert lim.stats.degraded and lim.stats.fail_open_activations == 1 and lim.stats.backend_errors >= 1
    assert local.reservation is not None
    await lim.settle(local.reservation, usage_cost(60, 0))  # goes to the local backend: no error, no retry
    assert lim.pending_settles == 0

    server.start()  # same port, empty data (no persistence)
    await asyncio.sleep(PROBE_S * 1.5)
    first = await lim.admit(adm(4, 60))
    assert first.allowed and not first.degraded
    second = await lim.admit(adm(5, 60))
    assert not second.allowed and not second.degraded  # exact shared limiting again, same limiter object
    assert lim.stats.recoveries == 1 and not lim.stats.degraded


@pytest.mark.parametrize("queued", [False, True], ids=["settle", "settle_soon"])
async def test_settle_during_outage_is_retried_in_background(
    fail_open: FailoverLimiter, server: RedisServer, queued: bool
) -> None:
    """`settle` and the gateway's path, `settle_soon` (queued, then sent without an admission to
    carry it): Redis is gone when it goes out, so the failover limiter retries it until Redis is back."""
    lim = fail_open
    decision = await lim.admit(adm(1, 60))
    assert decision.reservation is not None
    server.kill()
    if queued:
        lim.settle_soon(decision.reservation, usage_cost(50, 0))
    else:
        await lim.settle(decision.reservation, usage_cost(50, 0))  # returns at once; retried in background
    for _ in range(100):
        if lim.pending_settles:
            break
        await asyncio.sleep(0.01)
    assert lim.pending_settles == 1
    server.start()
    for _ in range(100):
        if lim.pending_settles == 0:
            break
        await asyncio.sleep(0.05)
    assert lim.pending_settles == 0
    assert lim.stats.settle_retries >= 1 and lim.stats.settle_drops == 0


async def test_settle_is_dropped_after_its_retries(fail_open: FailoverLimiter, server: RedisServer) -> None:
    lim = fail_open
    decision = await lim.admit(adm(1, 60))
    assert decision.reservation is not None
    server.kill()
    await lim.settle(decision.reservation, usage_cost(50, 0))
    for _ in range(100):
        if lim.pending_settles == 0:
            break
        await asyncio.sleep(0.05)
    assert lim.stats.settle_retries == 3 and lim.stats.settle_drops == 1


async def test_fail_closed_raises_fast_and_recovers(
    fail_closed: FailoverLimiter, server: RedisServer
) -> None:
    lim = fail_closed
    assert (await lim.admit(adm(1, 10))).allowed
    server.kill()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await lim.admit(adm(2, 10))
    with pytest.raises(BackendUnavailable):  # known down: fails without touching the socket
        await lim.admit(adm(3, 10))
    assert time.monotonic() - started < 3.0  # generous for a noisy box; a hang would take far longer
    assert lim.stats.fail_open_activations == 0 and lim.stats.degraded
    server.start()
    await asyncio.sleep(PROBE_S * 1.5)
    decision = await lim.admit(adm(4, 10))
    assert decision.allowed and not decision.degraded


async def test_redis_backend_raises_backend_unavailable_quickly(server: RedisServer) -> None:
    backend = RedisBackend.from_url(server.url, lease_s=30, key_prefix="x", op_timeout_s=0.25)
    await backend.load()
    server.kill()
    started = time.monotonic()
    for _ in range(3):
        with pytest.raises(BackendUnavailable):
            await backend.admit(adm(1, 10))
    assert time.monotonic() - started < 3.0
    await backend.close()


async def test_fail_open_top_ups_are_bounded_locally_and_settle_in_redis(
    fail_open: FailoverLimiter, server: RedisServer
) -> None:
    """A stream Redis admitted keeps growing while Redis refuses to work (out of memory), but only as
    far as the local limiter's view of the same rule allows (every chunk used to be granted); once
    Redis is back, its settlement charges the real usage there."""
    lim = fail_open
    decision = await lim.admit(adm(1, 40))
    assert decision.reservation is not None and not decision.degraded
    stream = decision.reservation
    admin = redis.Redis(port=server.port)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    chunk = {Dimension.OUTPUT_TOKENS: 25, Dimension.TOKENS: 25}
    grants = [await lim.top_up(stream, chunk) for _ in range(4)]
    assert grants == [True, True, False, False]  # 40 + 25 + 25 = 90 <= 100 < 115
    assert stream.reserved[Dimension.TOKENS] == 90
    assert lim.stats.errors == {("top_up", "oom"): 1}
    admin.config_set("maxmemory", 0)
    await asyncio.sleep(PROBE_S * 1.5)
    lim.settle_soon(stream, usage_cost(40, 45))
    await lim.flush()
    assert not (await lim.admit(adm(2, 16))).allowed  # 85 + 16 > 100: Redis charged the usage
    assert (await lim.admit(adm(3, 15))).allowed
