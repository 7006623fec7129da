"""SLO-aware admission and saturation (pools.slo): the pure decisions, and a pool that sheds a held
request predicted to miss its TTFT target while it queues one that would meet it."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.observability.collectors import PoolsCollector
from pools.config import Admission, Balancing, Breaker, Fairness, Retries, Saturation, SaturationSignals
from pools.fair import Flow
from pools.pool import NoCapacity, ReplicaPool
from pools.slo import DrainRate, Signals, SloAsk, ahead_in_queue, decide, predict_ttft, reroute, saturation
from tests.support.prom import metric


def test_ahead_in_fifo_is_every_held_request_of_its_band_and_above() -> None:
    backlog = {(1, "p"): 2, (0, "a"): 10, (0, "b"): 1, (-1, "c"): 7}
    assert ahead_in_queue(backlog, 0, "b", fair=False, shares={}) == 13
    assert ahead_in_queue(backlog, 1, "z", fair=False, shares={}) == 2


def test_ahead_under_fair_queuing_counts_turns_not_the_flooders_backlog() -> None:
    backlog = {(0, "a"): 50, (0, "b"): 1}
    # b's next request is its 2nd: one turn of its own, two of a's (capped by a's backlog) before it
    assert ahead_in_queue(backlog, 0, "b", fair=True, shares={}) == 1 + 2
    # a new tenant waits one turn of each backlogged tenant
    assert ahead_in_queue(backlog, 0, "c", fair=True, shares={}) == 2
    # the flooder waits behind its own backlog
    assert ahead_in_queue(backlog, 0, "a", fair=True, shares={}) == 50 + 1


def test_prediction_and_decision() -> None:
    assert predict_ttft(9, None, 0.2) is None
    assert predict_ttft(9, 0.0, 0.2) is None
    assert predict_ttft(9, 5.0, 0.2) == pytest.approx(2.2)
    ask = SloAsk(1.0, "shed")
    assert decide(None, ask) == "queue"  # nothing to go by: queue as before
    assert decide(0.9, ask) == "queue"
    assert decide(1.1, ask) == "shed"
    assert decide(1.1, None) == "queue"
    assert decide(1.1, SloAsk(1.0, "reroute")) == "reroute"


def test_reroute_goes_to_the_soonest_pool_that_meets_the_target() -> None:
    assert reroute(0.5, [0.1], 1.0) is None  # meets its target where it is
    assert reroute(None, [0.1], 1.0) is None  # unknown where it is: stay
    assert reroute(3.0, [2.0, 0.8, 0.2], 1.0) == 2
    assert reroute(3.0, [2.0, 0.8, None], 1.0) == 1  # None: unknown there, never a target
    assert reroute(3.0, [2.0, 0.8], 1.0) == 1
    assert reroute(3.0, [2.0, 1.5], 1.0) is None  # no pool meets it: stay (and be shed there)
    assert reroute(3.0, [], 1.0) is None


def test_drain_rate_over_its_window() -> None:
    d = DrainRate(window_s=5.0)
    assert d.rate(0.0) is None
    for i in range(11):
        d.tick(10.0 + i * 0.5)  # 2 per second for 5 s
    assert d.rate(15.0) == pytest.approx(11 / 5.0)
    assert d.rate(30.0) is None  # nothing finished for longer than the window
    burst = DrainRate()
    for _ in range(5):
        burst.tick(1.0)
    assert burst.rate(1.0) == 5.0  # a batch finishing at once counts over a second, not an instant


def test_saturation_needs_the_held_queue_or_two_signals() -> None:
    def verdict(**kw: object) -> bool:
        base = {"held": 0, "waiting": None, "kv_usage": None, "ttft_s": None}
        return saturation(Signals(**{**base, **kw}), 4.0, 0.9, 2.0)[0]  # type: ignore[arg-type]

    assert not verdict()
    assert verdict(held=1)
    assert not verdict(kv_usage=0.95)  # a KV cache kept full by prefix caching is not saturation
    assert not verdict(waiting=10.0)
    assert verdict(kv_usage=0.95, waiting=10.0)
    assert verdict(kv_usage=0.95, ttft_s=3.0)
    ok, signals = saturation(Signals(0, 10.0, 0.1, 3.0), 4.0, 0.9, None)  # latency is not a signal
    assert not ok and signals == {"queue": True, "kv": False, "latency": False}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _pool(clock: Clock, fair: bool = True) -> ReplicaPool:
    pool = ReplicaPool(
        "p",
        Balancing(),
        Saturation(inflight=1, signals=SaturationSignals(ttft_s=1.0)),
        Breaker(),
        Retries(),
        Admission(max_queued=64, max_wait_s=60, fairness=Fairness(enabled=fair)),
        clock=clock,
    )
    pool.set_members(["http://a:1"])
    return pool


async def _drained(pool: ReplicaPool, clock: Clock, per_s: float, n: int = 11) -> None:
    """`n` requests through the pool's one replica, finishing `per_s` a second, each TTFT 0.2 s."""
    for _ in range(n):
        r = await pool.acquire(None)
        clock.now += 1 / per_s
        pool.release(r, "ok", ttft=0.2)


async def test_a_held_request_predicted_to_miss_is_shed_and_one_that_meets_is_queued() -> None:
    clock = Clock()
    pool = _pool(clock)
    await _drained(pool, clock, per_s=2.0)  # the pool drains 2 requests a second
    assert pool.predict(0, Flow("x")) == pytest.approx(0.2)  # a replica is free: its TTFT alone
    busy = await pool.acquire(None)
    # The queue is empty: held now, the next would wait ~1/2 s, then 0.2 s of TTFT.
    assert pool.predict(0, Flow("x")) == pytest.approx(0.5 + 0.2, rel=0.1)
    queued = [Flow("a", slo=SloAsk(10.0, "shed")) for _ in range(4)]
    tasks = [asyncio.create_task(pool.acquire(None, flow=f)) for f in queued]
    await asyncio.sleep(0)
    assert pool.held == 4
    assert all(f.predicted is not None for f in queued)
    # a's 5th would wait for 5 dispatches at ~2/s: past a 1.5 s target -> shed at once
    with pytest.raises(NoCapacity) as refused:
        await pool.acquire(None, flow=Flow("a", slo=SloAsk(1.5, "shed")))
    assert refused.value.reason == "slo_unattainable"
    assert refused.value.retry_after >= 2
    # b is a new tenant: under fair queuing it waits one turn of a's, ~1.1 s: within 1.5 s, queued
    b = asyncio.create_task(pool.acquire(None, flow=Flow("b", slo=SloAsk(1.5, "shed"))))
    await asyncio.sleep(0)
    assert pool.held == 5
    # a class that queues never refuses
    q = asyncio.create_task(pool.acquire(None, flow=Flow("a")))
    await asyncio.sleep(0)
    assert pool.held == 6
    assert pool.stats.slo_refused == {(0, "a", "shed"): 1}
    registry = CollectorRegistry()
    registry.register(PoolsCollector({"p": pool}))
    text = generate_latest(registry).decode()
    assert metric(text, "llmgw_pool_slo_refusals_total", 'action="shed",band="standard",org="a"') == 1
    assert metric(text, "llmgw_pool_saturated", 'pool="p"') == 1
    pool.release(busy, "ok")
    first = await tasks[0]
    pool.release(first, "ok")
    got = await b  # fair queuing served the new tenant second, ahead of a's other three
    assert not tasks[1].done()
    pool.release(got, "ok")
    for t in [*tasks, q]:
        t.cancel()
    await asyncio.gather(*tasks, q, return_exceptions=True)


async def test_in_arrival_order_the_same_request_would_be_shed() -> None:
    clock = Clock()
    pool = _pool(clock, fair=False)
    await _drained(pool, clock, per_s=2.0)
    busy = await pool.acquire(None)
    tasks = [asyncio.create_task(pool.acquire(None, flow=Flow("a"))) for _ in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(NoCapacity):  # behind a's four: ~2.5 s
        await pool.acquire(None, flow=Flow("b", slo=SloAsk(1.5, "shed")))
    pool.release(busy, "ok")
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_prediction_is_compared_with_the_ttft_it_had() -> None:
    clock = Clock()
    pool = _pool(clock)
    await _drained(pool, clock, per_s=2.0)
    seen: list[tuple[float, float]] = []
    pool.on_prediction = lambda p, a: seen.append((p, a))
    busy = await pool.acquire(None)
    flow = Flow("a", cost=10, slo=SloAsk(5.0, "shed"))
    task = asyncio.create_task(pool.acquire(None, flow=flow))
    await asyncio.sleep(0)
    predicted = flow.predicted
    assert predicted is not None
    pool.release(busy, "ok")
    await task
    pool.settle(flow, 20, ttft=1.5)
    pool.settle(flow, 20, ttft=1.5)  # once
    assert seen == [(predicted, 1.5)]


def test_pool_signals_from_scrapes_and_ttft() -> None:
    from pools.replica import Load

    clock = Clock()
    pool = _pool(clock)
    r = pool.replicas[0]
    r.load = Load(waiting=6, running=4, kv_usage=0.5, prefix_queries=0, prefix_hits=0, at=clock.now)
    assert pool.saturated(clock.now) == (False, {"queue": True, "kv": False, "latency": False})
    r.observe_ttft(1.5)
    assert pool.saturated(clock.now) == (True, {"queue": True, "kv": False, "latency": True})
    clock.now += 10  # the scrape went stale: only latency is left
    assert pool.saturated(clock.now)[0] is False
