"""Redis-only behaviour: key layout on a real server, Lua calendar == Python calendar, NOSCRIPT reload."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from ratelimit.model import Admission, Dimension, Level, Rule
from ratelimit.redis_backend import RedisBackend
from ratelimit.rules import request_cost, usage_cost
from ratelimit.windows import period
from tests.support.redis_server import RedisServer


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_server.url)
    yield c
    await c.aclose()


async def test_every_key_written_hashes_to_the_prefix_slot(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    backend = RedisBackend.from_url(redis_server.url, lease_s=30, key_prefix="slots")
    await backend.load()
    scopes = ["a:b", "{x}", "}{", "*", "org/app", "%41"]
    levels = list(Level)
    rules = tuple(Rule(levels[i % len(levels)], s, d, 10**6) for i, s in enumerate(scopes) for d in Dimension)
    decision = await backend.admit(Admission("slot-1", rules, request_cost(5, 5)))
    assert decision.reservation is not None
    await backend.settle(decision.reservation, usage_cost(5, 5))
    decision = await backend.admit(Admission("slot-2", rules, request_cost(5, 5)))  # leaves live leases
    keys = [k async for k in client.scan_iter(match="slots:{slots}*")]
    kinds = {k.rsplit(b":", 2)[-2] if b":q:" in k else k.rsplit(b":", 1)[-1] for k in keys}
    assert kinds == {b"sw", b"q", b"leases", b"lh"}
    assert {key_slot(k) for k in keys} == {key_slot(b"{slots}")}
    assert all([await client.pttl(k) > 0 for k in keys])  # everything expires by itself
    await backend.close()


async def test_lua_calendar_matches_python(client: aioredis.Redis) -> None:
    from importlib import resources

    lib = resources.files("ratelimit").joinpath("lua", "lib_v4.lua").read_text()
    script = lib + "\nlocal id, e = period(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))\nreturn {id, e}"
    start = dt.datetime(1999, 12, 25, tzinfo=dt.UTC)
    for days in list(range(0, 800, 3)) + [36_500 + d for d in range(0, 400, 7)]:
        t = int((start + dt.timedelta(days=days, hours=days % 24)).timestamp() * 1000)
        for kind in ("d", "M"):
            for off in (0, -300, 330, 840):  # UTC, New York (EST), India, Kiribati
                pid, end = await client.eval(script, 0, kind, t, off)  # type: ignore[misc]
                assert (pid.decode(), int(end)) == period(kind, t, off), (kind, t, off)


@pytest.mark.parametrize("seed", range(4))
async def test_lua_window_sum_matches_the_sub_window_counters(client: aioredis.Redis, seed: int) -> None:
    """The minute window's running sum (`t`, `h`, lib_v4.lua) against a plain model of the window (the
    usage of the last n sub-windows): random settles and reads over time, with quiet spells longer than
    the window and the server clock stepping back."""
    from importlib import resources

    lib = resources.files("ratelimit").joinpath("lua", "lib_v4.lua").read_text()
    add = lib + "\nwindow_add(KEYS[1], tonumber(ARGV[1]), 0, tonumber(ARGV[2]), 12, 5000)\nreturn 1"
    read = lib + "\nlocal s, h = window_sum(KEYS[1], tonumber(ARGV[1]), 12)\nreturn {s, h or -1}"
    counts = lib + "\nreturn window_counts(KEYS[1], tonumber(ARGV[1]), 12)"
    rng = random.Random(seed)
    wk, n = f"{{wtest}}:k{seed}:sw", 12
    model: dict[int, int] = {}  # sub-window -> usage charged there
    cur, newest = 1000, None
    for _ in range(400):
        step = rng.choice([0, 0, 0, 1, 1, 2, 5, 11, 12, 13, 30, -1, -3, -15])
        cur = max(0, cur + step)
        if rng.random() < 0.7:
            used = rng.randint(1, 50)
            await client.eval(add, 1, wk, used, cur)  # type: ignore[misc]
            # Where the usage lands: its own sub-window, or the newest one when the clock stepped back
            # past the window (never behind it).
            at = cur if newest is None or cur > newest - n else newest
            model[at] = model.get(at, 0) + used
            newest = max(newest, cur) if newest is not None else cur
        total, h = await client.eval(read, 1, wk, cur)  # type: ignore[misc]
        if newest is None or newest <= cur - n:
            assert (total, h) == (0, -1)
            continue
        # The window ends at the newest sub-window ever charged, or now if later: after the clock
        # stepped back, what was charged "in the future" still counts (conservatively), and what that
        # future pushed out of the window is gone.
        end = max(cur, newest)
        expected = sum(v for k, v in model.items() if end - n < k <= end)
        assert (total, h) == (expected, newest), (cur, newest, model)
        got = await client.eval(counts, 1, wk, cur)  # type: ignore[misc]
        assert got == [model.get(k, 0) if k > newest - n else 0 for k in range(cur - n + 1, cur + 1)]


async def test_scripts_reload_after_script_flush(redis_server: RedisServer, client: aioredis.Redis) -> None:
    backend = RedisBackend.from_url(redis_server.url, lease_s=30, key_prefix="flush")
    await backend.load()
    rules = (Rule(Level.KEY, "k", Dimension.REQUESTS, 2),)
    assert (await backend.admit(Admission("f1", rules, request_cost(1, 1)))).allowed
    await client.script_flush()  # what a Redis restart or failover does to the script cache
    assert (await backend.admit(Admission("f2", rules, request_cost(1, 1)))).allowed
    assert not (await backend.admit(Admission("f3", rules, request_cost(1, 1)))).allowed
    await backend.close()


async def _evalsha_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_a_queued_settlement_rides_on_the_next_admission(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    """`settle_soon` then `admit`: one script call for both (the settlement is applied first), and the
    carry timer that fires later finds nothing left to send."""
    backend = RedisBackend.from_url(redis_server.url, lease_s=30, key_prefix="carry", carry_s=0.05)
    await backend.load()
    rules = (Rule(Level.KEY, "k", Dimension.CONCURRENT, 1), Rule(Level.KEY, "k", Dimension.TOKENS, 100))
    first = await backend.admit(Admission("c1", rules, request_cost(40, 40)))
    assert first.reservation is not None
    before = await _evalsha_calls(client)
    backend.settle_soon(first.reservation, usage_cost(10, 5))
    second = await backend.admit(Admission("c2", rules, request_cost(40, 40)))
    assert second.allowed  # the slot was freed, and only 15 tokens were charged, in the same call
    assert [s.remaining for s in second.states] == [0, 100 - 15 - 80]
    await asyncio.sleep(0.1)  # past carry_s: the timer fired and had nothing to send
    assert await _evalsha_calls(client) - before == 1  # c2 alone: no settle call of its own
    assert await client.zcard("carry:{carry}:leases") == 1  # only c2's lease is left
    await backend.close()


async def test_queued_settlements_go_out_together_after_the_carry_delay(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    backend = RedisBackend.from_url(redis_server.url, lease_s=30, key_prefix="alone", carry_s=0.01)
    await backend.load()
    rules = (Rule(Level.KEY, "k", Dimension.TOKENS, 1_000),)
    held = [await backend.admit(Admission(f"a{i}", rules, request_cost(10, 10))) for i in range(5)]
    before = await _evalsha_calls(client)
    for d in held:
        assert d.reservation is not None
        backend.settle_soon(d.reservation, usage_cost(1, 1))
    await asyncio.sleep(0.1)
    assert await _evalsha_calls(client) - before == 1  # one settle_v5 call for all five
    assert await client.zcard("alone:{alone}:leases") == 0
    await backend.close()


async def test_a_quota_zone_names_the_local_day(redis_server: RedisServer, client: aioredis.Redis) -> None:
    """With `timezone`, a day quota is counted under the zone's calendar day (Kiritimati, UTC+14: most
    of the time a different date than UTC's)."""
    import time

    from ratelimit.windows import QuotaZone

    backend = RedisBackend.from_url(
        redis_server.url, lease_s=30, key_prefix="tz", timezone="Pacific/Kiritimati"
    )
    await backend.load()
    rule = Rule(Level.ORG, "acme", Dimension.TOKENS_DAY, 1000)
    decision = await backend.admit(Admission("tz-1", (rule,), request_cost(5, 5)))
    assert decision.reservation is not None
    await backend.settle(decision.reservation, usage_cost(5, 5))
    now = int(time.time() * 1000)
    local, _ = period("d", now, QuotaZone("Pacific/Kiritimati").offset(now))
    keys = [k.decode() async for k in client.scan_iter(match="tz:{tz}:org:acme:tokens_day:q:*")]
    assert keys == [f"tz:{{tz}}:org:acme:tokens_day:q:{local}"], keys
    assert int(await client.get(keys[0])) == 10
    await backend.close()
