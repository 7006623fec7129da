"""The limiter contract, run against both backends (memory and a real redis-server): see conftest.Harness."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import random
from collections.abc import Mapping

import pytest
from contract_harness import Harness

from ratelimit.model import Admission, Decision, Dimension, Level, Limiter, Priority, Reservation, Rule
from ratelimit.rules import request_cost, usage_cost

_ids = itertools.count()


def _usd(inp: int, out: int) -> int:
    """A price for the dollar dimensions (micro-dollars): 7 per input token, 11 per output token."""
    return 7 * inp + 11 * out


def _cost(inp: int, out: int) -> dict[Dimension, int]:
    return request_cost(inp, out, _usd(inp, out))


def _used(inp: int, out: int) -> dict[Dimension, int]:
    return usage_cost(inp, out, _usd(inp, out))


def rule(
    dim: Dimension,
    limit: int,
    level: Level = Level.KEY,
    scope: str = "k1",
    shadow: bool = False,
    share: float = 0.0,
) -> Rule:
    return Rule(level, scope, dim, limit, shadow, share)


def admission(
    rules: tuple[Rule, ...], inp: int = 0, out: int = 0, priority: Priority = "standard"
) -> Admission:
    return Admission(f"req-{next(_ids)}", rules, _cost(inp, out), priority)


async def admit_ok(limiter: Limiter, adm: Admission) -> Reservation:
    decision = await limiter.admit(adm)
    assert decision.allowed, decision
    assert decision.reservation is not None
    return decision.reservation


def state_of(decision: Decision, r: Rule) -> tuple[int, float]:
    [s] = [s for s in decision.states if s.rule == r]
    return s.remaining, s.reset_s


async def remaining(limiter: Limiter, rules: tuple[Rule, ...]) -> Mapping[Rule, int]:
    """Each rule's remaining allowance, read by admitting (then settling) a zero-cost probe."""
    adm = Admission(f"probe-{next(_ids)}", rules, {d: 0 for d in Dimension})
    decision = await limiter.admit(adm)
    assert decision.reservation is not None
    await limiter.settle(decision.reservation, {})
    return {s.rule: s.remaining for s in decision.states}


async def test_all_or_nothing_across_levels(harness: Harness) -> None:
    lim = await harness.make()
    key = rule(Dimension.TOKENS, 1000)
    app = rule(Dimension.TOKENS, 1000, Level.APP, "acme/app")
    org = rule(Dimension.TOKENS, 150, Level.ORG, "acme")
    glob = rule(Dimension.REQUESTS, 100, Level.GLOBAL, "*")
    rules = (key, app, org, glob)
    await admit_ok(lim, admission(rules, 60, 40))
    refused = await lim.admit(admission(rules, 60, 40))
    assert not refused.allowed and refused.reservation is None
    assert refused.refused_by == org
    # The refusal reserved nothing anywhere: exactly the org's last 50 tokens still fit.
    await admit_ok(lim, admission(rules, 30, 20))
    left = await remaining(lim, rules)
    assert left == {key: 850, app: 850, org: 0, glob: 98}


@pytest.mark.parametrize("dim", [d for d in Dimension])
async def test_each_dimension_limits_and_settles(harness: Harness, dim: Dimension) -> None:
    lim = await harness.make()
    cost = _cost(30, 20)[dim]
    r = rule(dim, 3 * cost + cost // 2)
    held = [await admit_ok(lim, admission((r,), 30, 20)) for _ in range(3)]
    refused = await lim.admit(admission((r,), 30, 20))
    assert not refused.allowed
    assert refused.refused_by == r
    assert refused.retry_after_s > 0
    await lim.settle(held[0], _used(30, 20))
    again = await lim.admit(admission((r,), 30, 20))
    # Settling frees a concurrency slot; for every other dimension the usage stays counted.
    assert again.allowed == (dim is Dimension.CONCURRENT)


async def test_settlement_replaces_reservation_by_real_usage(harness: Harness) -> None:
    lim = await harness.make()
    minute = rule(Dimension.TOKENS, 100_000)
    day = rule(Dimension.TOKENS_DAY, 100_000, Level.ORG, "acme")
    month = rule(Dimension.TOKENS_MONTH, 100_000, Level.ORG, "acme")
    out_min = rule(Dimension.OUTPUT_TOKENS, 100_000)
    rules = (minute, day, month, out_min)
    rng = random.Random(7)
    held = [await admit_ok(lim, admission(rules, 200, 800)) for _ in range(6)]
    settled_total, settled_out = 0, 0
    for i, res in enumerate(held):
        inp, out = rng.randint(0, 200), rng.randint(0, 800)
        await lim.settle(res, _used(inp, out))
        settled_total += inp + out
        settled_out += out
        live = len(held) - i - 1
        left = await remaining(lim, rules)
        assert left[minute] == 100_000 - settled_total - live * 1000
        assert left[day] == left[month] == left[minute]
        assert left[out_min] == 100_000 - settled_out - live * 800


async def test_sliding_window_slides_by_sub_window(harness: Harness) -> None:
    lim = await harness.make(sub_window_s=0.2)  # 12 x 0.2 s: a 2.4 s window
    r = rule(Dimension.TOKENS, 100)
    await lim.settle(await admit_ok(lim, admission((r,), 60)), _used(60, 0))
    await harness.advance(1.2)
    await lim.settle(await admit_ok(lim, admission((r,), 40)), _used(40, 0))
    refused = await lim.admit(admission((r,), 1))
    assert not refused.allowed
    # The first 60 leave the window first: at most one window after they were counted.
    assert 0 < refused.retry_after_s <= 2.4
    await harness.advance(1.4)  # the first 60 have left the window, the 40 are still in it
    assert not (await lim.admit(admission((r,), 61))).allowed
    await admit_ok(lim, admission((r,), 60))


async def test_top_up_is_all_or_nothing(harness: Harness) -> None:
    lim = await harness.make()
    key_out = rule(Dimension.OUTPUT_TOKENS, 1000)
    org_tokens = rule(Dimension.TOKENS, 300, Level.ORG, "acme")
    rules = (key_out, org_tokens)
    res = await admit_ok(lim, admission(rules, 50, 100))
    chunk = {Dimension.OUTPUT_TOKENS: 100, Dimension.TOKENS: 100}
    assert await lim.top_up(res, chunk)
    assert res.reserved[Dimension.OUTPUT_TOKENS] == 200 and res.reserved[Dimension.TOKENS] == 250
    assert not await lim.top_up(res, chunk)  # org: 250 + 100 > 300
    assert res.reserved[Dimension.OUTPUT_TOKENS] == 200
    assert await remaining(lim, rules) == {key_out: 800, org_tokens: 50}  # the key grew nothing either
    assert await lim.top_up(res, {Dimension.OUTPUT_TOKENS: 50, Dimension.TOKENS: 50})
    await lim.settle(res, _used(50, 230))
    assert await remaining(lim, rules) == {key_out: 770, org_tokens: 20}


async def test_top_up_of_an_expired_reservation_is_refused(harness: Harness) -> None:
    lim = await harness.make(lease_s=0.5)
    r = rule(Dimension.TOKENS, 1000)
    res = await admit_ok(lim, admission((r,), 10))
    await harness.advance(0.8)
    assert not await lim.top_up(res, {Dimension.TOKENS: 10})


async def test_concurrency_slot_released_on_settle_and_on_lease_expiry(harness: Harness) -> None:
    lim = await harness.make(lease_s=1.0)
    slots = rule(Dimension.CONCURRENT, 2, Level.ORG, "acme")
    a = await admit_ok(lim, admission((slots,), 10))
    await admit_ok(lim, admission((slots,), 10))
    refused = await lim.admit(admission((slots,), 10))
    assert not refused.allowed and refused.retry_after_s > 0
    await lim.settle(a, _used(10, 5))
    await admit_ok(lim, admission((slots,), 10))
    assert not (await lim.admit(admission((slots,), 10))).allowed
    await harness.advance(1.3)  # both holders "died" without settling
    await admit_ok(lim, admission((slots,), 10))


async def test_unsettled_reservation_stops_counting_after_its_lease(harness: Harness) -> None:
    lim = await harness.make(lease_s=1.0)
    r = rule(Dimension.TOKENS, 100)
    dead = await admit_ok(lim, admission((r,), 80))  # its gateway is killed: never settled, never renewed
    assert not (await lim.admit(admission((r,), 30))).allowed
    await harness.advance(1.3)
    alive = await admit_ok(lim, admission((r,), 30))
    # A late settle of the expired lease charges nothing: the lease already stopped counting.
    await lim.settle(dead, _used(80, 0))
    assert (await remaining(lim, (r,)))[r] == 70
    await lim.settle(alive, _used(30, 0))
    assert (await remaining(lim, (r,)))[r] == 70


async def test_renew_keeps_leases_alive(harness: Harness) -> None:
    lim = await harness.make(lease_s=1.0)
    r = rule(Dimension.TOKENS, 100)
    slots = rule(Dimension.CONCURRENT, 2, Level.GLOBAL, "*")
    held = [await admit_ok(lim, admission((r, slots), 40)) for _ in range(2)]
    for _ in range(3):  # 1.5 s in all, longer than the lease
        await harness.advance(0.5)
        await lim.renew(held)
    refused = await lim.admit(admission((r, slots), 10))
    assert not refused.allowed
    await harness.advance(1.3)  # renewals stop: the leases lapse
    await admit_ok(lim, admission((r, slots), 100))


async def test_shadow_rules_count_and_report_but_never_block(harness: Harness) -> None:
    lim = await harness.make()
    shadow = rule(Dimension.REQUESTS, 1, shadow=True)
    enforced = rule(Dimension.TOKENS, 100, Level.ORG, "acme")
    rules = (shadow, enforced)
    first = await lim.admit(admission(rules, 10))
    assert first.allowed and first.shadow_refusals == ()
    assert state_of(first, shadow)[0] == 0  # counted
    for _ in range(2):
        d = await lim.admit(admission(rules, 10))
        assert d.allowed and d.shadow_refusals == (shadow,) and d.refused_by is None
    over = await lim.admit(admission(rules, 90))
    assert not over.allowed and over.refused_by == enforced and over.shadow_refusals == (shadow,)


async def test_premium_keeps_its_reserved_share_of_shared_levels(harness: Harness) -> None:
    lim = await harness.make()
    glob = rule(Dimension.TOKENS, 1000, Level.GLOBAL, "*", share=0.2)
    key = rule(Dimension.TOKENS, 10_000)
    rules = (key, glob)
    await admit_ok(lim, admission(rules, 700))
    standard = await lim.admit(admission(rules, 200))
    assert not standard.allowed and standard.refused_by == glob
    premium = await lim.admit(admission(rules, 200, priority="premium"))
    assert premium.allowed
    assert state_of(premium, glob)[0] == 100
    assert not (await lim.admit(admission(rules, 200, priority="premium"))).allowed


async def test_remaining_and_reset_values(harness: Harness) -> None:
    lim = await harness.make()
    minute = rule(Dimension.TOKENS, 1000)
    idle = rule(Dimension.OUTPUT_TOKENS, 500)
    day = rule(Dimension.TOKENS_DAY, 5000)
    month = rule(Dimension.TOKENS_MONTH, 50_000)
    slots = rule(Dimension.CONCURRENT, 4)
    d = await lim.admit(admission((minute, idle, day, month, slots), 300))
    assert d.allowed
    rem, reset = state_of(d, minute)
    assert rem == 700 and 55 <= reset <= 60
    assert state_of(d, idle) == (500, 0)
    assert state_of(d, slots) == (3, 0)
    now = (
        dt.datetime.now(dt.UTC)
        if harness.kind != "memory"
        else dt.datetime.fromtimestamp(harness.clock.now, dt.UTC)
    )
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
    next_month = dt.datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=dt.UTC)
    rem, reset = state_of(d, day)
    assert rem == 4700 and abs(reset - (midnight - now).total_seconds()) < 5
    rem, reset = state_of(d, month)
    assert rem == 49_700 and abs(reset - (next_month - now).total_seconds()) < 5
    # Refused only for the running request's reservation: it settles soon (at most what it reserved).
    soon = await lim.admit(admission((day,), 4701))
    assert not soon.allowed and soon.retry_after_s == 1.0
    # More than the settled usage leaves: only the period's end helps.
    refused = await lim.admit(admission((day,), 5001))
    assert not refused.allowed and abs(refused.retry_after_s - (midnight - now).total_seconds()) < 5


async def test_retry_after_of_a_full_minute_window(harness: Harness) -> None:
    lim = await harness.make()
    r = rule(Dimension.TOKENS, 100)
    await lim.settle(await admit_ok(lim, admission((r,), 100)), _used(100, 0))
    refused = await lim.admit(admission((r,), 1))
    assert not refused.allowed
    # The usage sits in the current sub-window: it leaves 55-60 s from now.
    assert 50 <= refused.retry_after_s <= 60


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_concurrent_admits_never_over_admit(harness: Harness, seed: int) -> None:
    # Two limiters = two gateway replicas sharing one backend (the memory backend shares one instance).
    replicas = [await harness.make(), await harness.make()]
    rng = random.Random(seed)
    tokens = rule(Dimension.TOKENS, 1000, Level.ORG, "acme")
    slots = rule(Dimension.CONCURRENT, 25, Level.GLOBAL, "*")
    rules = (tokens, slots)
    adms = [admission(rules, rng.randint(1, 100)) for _ in range(60)]
    decisions = await asyncio.gather(*(replicas[i % 2].admit(a) for i, a in enumerate(adms)))
    admitted = [a for a, d in zip(adms, decisions, strict=True) if d.allowed]
    used = sum(a.cost[Dimension.TOKENS] for a in admitted)
    assert 0 < len(admitted) <= 25 and used <= 1000
    left = 1000 - used
    # Nothing was under-admitted either: every refused request really did not fit at the end.
    for a, d in zip(adms, decisions, strict=True):
        if not d.allowed:
            assert a.cost[Dimension.TOKENS] > left or len(admitted) == 25
    assert (await remaining(replicas[0], rules))[tokens] == left


async def test_renew_does_not_revive_an_expired_lease(harness: Harness) -> None:
    lim = await harness.make(lease_s=0.5)
    r = rule(Dimension.TOKENS, 100)
    late = await admit_ok(lim, admission((r,), 80))
    await harness.advance(0.8)
    await lim.renew([late])  # too late: the lease already stopped counting
    await admit_ok(lim, admission((r,), 100))


async def test_settle_many_settles_each_reservation_once(harness: Harness) -> None:
    lim = await harness.make()
    tokens = rule(Dimension.TOKENS, 10_000)
    slots = rule(Dimension.CONCURRENT, 3, Level.ORG, "acme")
    rules = (tokens, slots)
    held = [await admit_ok(lim, admission(rules, 100, 900)) for _ in range(3)]
    assert not (await lim.admit(admission(rules, 1, 1))).allowed  # all three slots taken
    usages = [_used(10, 20), _used(30, 40), _used(0, 0)]
    await lim.settle_many(list(zip(held, usages, strict=True)))
    left = await remaining(lim, rules)
    assert left[tokens] == 10_000 - 100
    assert left[slots] == 3
    await lim.settle_many(list(zip(held, usages, strict=True)))  # a retried batch charges nothing twice
    assert (await remaining(lim, rules))[tokens] == 10_000 - 100


async def test_settle_soon_applies_before_the_next_admission(harness: Harness) -> None:
    """A queued settlement (the gateway's path) is in force for the very next admission of the same
    limiter: the Redis backend carries it in that admission's script call, before its checks."""
    lim = await harness.make()
    tokens = rule(Dimension.TOKENS, 1_000)
    slot = rule(Dimension.CONCURRENT, 1, Level.ORG, "acme")
    rules = (tokens, slot)
    held = await admit_ok(lim, admission(rules, 100, 800))
    lim.settle_soon(held, _used(30, 20))
    # The slot is free and only the real usage (50) counts: 950 fit, at once.
    nxt = await lim.admit(admission(rules, 450, 500))
    assert nxt.allowed, nxt
    assert state_of(nxt, tokens)[0] == 0
    assert nxt.reservation is not None
    lim.settle_soon(nxt.reservation, _used(450, 500))
    await lim.flush()
    left = await remaining(lim, rules)
    assert left == {tokens: 0, slot: 1}


async def test_settle_soon_goes_out_on_its_own_without_admissions(harness: Harness) -> None:
    """No admission follows: the queued settlements still reach the backend, together, within the
    carry delay (a replica's idle minute must not keep its finished requests' slots)."""
    lim = await harness.make()
    tokens = rule(Dimension.TOKENS, 10_000)
    slots = rule(Dimension.CONCURRENT, 3, Level.ORG, "acme")
    rules = (tokens, slots)
    held = [await admit_ok(lim, admission(rules, 100, 900)) for _ in range(3)]
    for reservation, used in zip(held, [_used(10, 20), _used(30, 40), _used(0, 0)], strict=True):
        lim.settle_soon(reservation, used)
    other = await harness.make()  # another replica sees them without this one admitting again
    for _ in range(100):
        left = await remaining(other, rules)
        if left[slots] == 3:
            break
        await asyncio.sleep(0.01)
    assert left == {tokens: 10_000 - 100, slots: 3}
