"""ReplicaPool: membership, outcomes, and the bounded priority-aware hold queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pools.config import Admission, Balancing, Breaker, Fairness, Retries, Saturation
from pools.fair import Flow
from pools.pool import NoCapacity, ReplicaPool


def make_pool(
    max_queued: int = 8,
    wait: float = 5.0,
    cold: float = 5.0,
    inflight: int = 1,
    fairness: Fairness | None = None,
) -> ReplicaPool:
    return ReplicaPool(
        "p",
        Balancing(strategy="least_load"),
        Saturation(inflight=inflight),
        Breaker(failures=2, open_s=60),
        Retries(),
        Admission(
            max_queued=max_queued, max_wait_s=wait, cold_start_timeout_s=cold, fairness=fairness or Fairness()
        ),
    )


async def _served_order(
    pool: ReplicaPool, arrivals: list[tuple[str, Flow]], used: Callable[[str], int]
) -> list[str]:
    """Hold `arrivals` behind one busy replica, then serve them one at a time, each using `used(name)`
    tokens."""
    pool.set_members(["http://a:1"])
    first = await pool.acquire(None)
    order: list[str] = []

    async def wait(name: str, flow: Flow) -> None:
        r = await pool.acquire(None, 0, flow=flow)
        order.append(name)
        pool.settle(flow, used(name))
        pool.release(r, "ok")

    tasks = [asyncio.create_task(wait(name, flow)) for name, flow in arrivals]
    await asyncio.sleep(0)
    assert pool.held == len(arrivals)
    pool.release(first, "ok")
    await asyncio.gather(*tasks)
    return order


async def test_held_requests_of_a_flooding_org_do_not_shut_out_another() -> None:
    def arrivals() -> list[tuple[str, Flow]]:
        return [(f"a{i}", Flow("a", cost=10)) for i in range(6)] + [("b0", Flow("b", cost=10))]

    order = await _served_order(make_pool(max_queued=16), arrivals(), lambda _: 100)
    assert order.index("b0") <= 1  # FIFO would serve it last
    fifo_pool = make_pool(max_queued=16, fairness=Fairness(enabled=False))
    fifo = await _served_order(fifo_pool, arrivals(), lambda _: 100)
    assert fifo[-1] == "b0"


async def test_settled_usage_decides_the_next_turn() -> None:
    """Estimates say a and b cost the same; a's answers are 10x longer, so b is served twice as often."""
    arrivals = [(f"{t}{i}", Flow(t, cost=10)) for i in range(8) for t in "ab"]
    order = await _served_order(make_pool(max_queued=32), arrivals, lambda n: 1000 if n[0] == "a" else 100)
    assert "".join(n[0] for n in order[:6]).count("b") >= 4


async def test_a_held_request_proceeds_when_a_replica_appears() -> None:
    pool = make_pool()
    task = asyncio.create_task(pool.acquire(None))
    await asyncio.sleep(0)
    assert pool.held == 1 and not task.done()
    pool.set_members(["http://a:1"])
    replica = await task
    assert replica.base == "http://a:1" and replica.inflight == 1 and pool.held == 0


async def test_cold_start_timeout_raises_no_capacity() -> None:
    pool = make_pool(cold=0.01)
    with pytest.raises(NoCapacity) as info:
        await pool.acquire(None)
    assert info.value.reason == "cold_start" and pool.held == 0 and pool.stats.hold_timeouts == 1


async def test_saturated_pool_serves_held_requests_by_priority_then_arrival() -> None:
    pool = make_pool()
    pool.set_members(["http://a:1"])
    first = await pool.acquire(None)  # inflight limit 1: the replica is now saturated
    order: list[str] = []

    async def wait(name: str, priority: int) -> None:
        r = await pool.acquire(None, priority)
        order.append(name)
        pool.release(r, "ok")

    tasks = [
        asyncio.create_task(wait("std-1", 0)),
        asyncio.create_task(wait("std-2", 0)),
        asyncio.create_task(wait("premium", 1)),
    ]
    await asyncio.sleep(0)
    assert pool.held == 3
    pool.release(first, "ok")
    await asyncio.gather(*tasks)
    assert order == ["premium", "std-1", "std-2"]


async def test_full_queue_refuses_at_once() -> None:
    pool = make_pool(max_queued=1)
    pool.set_members(["http://a:1"])
    await pool.acquire(None)
    held = asyncio.create_task(pool.acquire(None))
    await asyncio.sleep(0)
    with pytest.raises(NoCapacity) as info:
        await pool.acquire(None)
    assert info.value.reason == "queue_full"
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert pool.held == 0


async def test_failures_open_the_breaker_and_membership_keeps_replica_state() -> None:
    pool = make_pool(inflight=10, wait=0.01)
    pool.set_members(["http://a:1", "http://b:1"])
    a = next(r for r in pool.replicas if r.base == "http://a:1")
    for _ in range(2):
        a.inflight += 1
        pool.release(a, "fail")
    picked = {(await pool.acquire(None)).base for _ in range(6)}
    assert picked == {"http://b:1"}
    pool.set_members(["http://b:1", "http://a:1", "http://c:1"])
    assert next(r for r in pool.replicas if r.base == "http://a:1") is a  # same object, breaker kept


async def test_holding_switched_off_refuses_at_once_with_the_reason() -> None:
    pool = make_pool(wait=0)
    pool.set_members(["http://a:1"])
    await pool.acquire(None)
    with pytest.raises(NoCapacity) as info:
        await pool.acquire(None)
    assert info.value.reason == "saturated" and pool.held == 0
