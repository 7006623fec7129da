"""The hold queue's fairness metrics: dispatched tokens by band and org (capped), tenant shares."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from gateway.observability.collectors import PoolsCollector
from pools import pool as pool_module
from pools.config import Admission, Balancing, Breaker, Retries, Saturation
from pools.fair import Flow
from pools.pool import OTHER_ORG, PoolStats, ReplicaPool
from tests.support.prom import metric


async def test_dispatched_tokens_and_shares_are_exported() -> None:
    pool = ReplicaPool(
        "p", Balancing(), Saturation(inflight=1), Breaker(), Retries(), Admission(max_queued=16)
    )
    pool.set_members(["http://a:1"])
    busy = await pool.acquire(None)
    waits: list[float] = []
    pool.on_wait = lambda s, band, org: waits.append(band)
    flows = [Flow("a", cost=100), Flow("a", cost=100), Flow("b", cost=100), Flow("c", cost=50)]
    tasks = [asyncio.create_task(pool.acquire(None, 1 if f.org == "c" else 0, flow=f)) for f in flows]
    await asyncio.sleep(0)
    pool.release(busy, "ok")  # c (premium) is dispatched
    got = await tasks[3]
    pool.settle(flows[3], 300)  # its answer was long
    pool.release(got, "ok")  # then a's first
    await tasks[0]
    registry = CollectorRegistry()
    registry.register(PoolsCollector({"p": pool}))
    text = generate_latest(registry).decode()
    assert metric(text, "llmgw_pool_dispatched_tokens_total", 'band="premium",org="c"') == 300
    assert metric(text, "llmgw_pool_dispatched_tokens_total", 'band="standard",org="a"') == 100
    # a has had all of standard's tokens so far, b none; each is due half
    assert metric(text, "llmgw_pool_tenant_share", 'band="standard",pool="p",tenant="a"') == 1.0
    assert metric(text, "llmgw_pool_tenant_share", 'band="standard",pool="p",tenant="b"') == 0.0
    assert metric(text, "llmgw_pool_tenant_due_share", 'tenant="b"') == 0.5
    assert waits == [1, 0]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def test_org_rows_are_capped() -> None:
    stats = PoolStats()
    for i in range(pool_module.MAX_ORGS + 5):
        stats.count_fair(0, f"org-{i}", 10)
    assert len(stats.fair_tokens) == pool_module.MAX_ORGS + 1
    assert stats.fair_tokens[(0, OTHER_ORG)] == 50
