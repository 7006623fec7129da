"""SharedCalibration against a real redis-server: a replica that saw no traffic gets the deployment's
cut, a replica that left is forgotten, hostile hash fields are skipped, Redis gone is counted."""

from __future__ import annotations

import random
import struct

import pytest
import redis.asyncio as aioredis
from prometheus_client import generate_latest

from gateway.config import default_policy
from gateway.observability.metrics import Metrics
from gateway.routing.calibration_share import SharedCalibration
from router.calibration import LiveCalibration
from tests.support.procs import free_port

KEY = "t:calibration:auto"


def _cal() -> LiveCalibration:
    return LiveCalibration(0.3, window=500, min_samples=100)


def _share(
    client: aioredis.Redis, cal: LiveCalibration, now: list[float]
) -> tuple[SharedCalibration, Metrics]:
    metrics = Metrics(default_policy())
    return SharedCalibration(client, {"auto": cal}, metrics, "t:", clock=lambda: now[0]), metrics


async def test_an_idle_replica_gets_the_deployments_cut_and_leavers_are_forgotten(
    redis_client: aioredis.Redis,
) -> None:
    busy, idle = _cal(), _cal()
    rng = random.Random(5)
    for _ in range(400):
        busy.observe(rng.random())
    now = [1000.0]
    share_busy, _ = _share(redis_client, busy, now)
    share_idle, _ = _share(redis_client, idle, now)
    assert idle.cut() is None  # no traffic of its own
    await share_busy.sync()
    await share_idle.sync()
    cut = idle.cut()
    assert cut is not None and cut == pytest.approx(0.7, abs=0.06)  # the 70th percentile of U(0, 1)
    assert await redis_client.hlen(KEY) == 2
    now[0] += 60  # the busy replica stops syncing: its sketch goes stale and is deleted
    await share_idle.sync()
    assert await redis_client.hlen(KEY) == 1
    assert idle.cut() is None
    await share_idle.close()
    assert await redis_client.hlen(KEY) == 0


async def test_hostile_fields_are_skipped(redis_client: aioredis.Redis) -> None:
    donor = _cal()
    for i in range(200):
        donor.observe(i / 200)
    now = [50.0]
    stamp = struct.pack("!d", now[0])
    await redis_client.hset(
        KEY,
        mapping={
            b"short": b"\x01",
            b"garbage": stamp + b"\xff\x00 not a sketch",
            b"good": stamp + donor.to_bytes(),
        },
    )
    cal = _cal()
    share, _ = _share(redis_client, cal, now)
    await share.sync()
    assert cal.cut() is not None
    assert not await redis_client.hexists(KEY, b"short")  # unreadable stamp: removed like a stale one


async def test_redis_gone_is_counted_and_the_local_cut_stays() -> None:
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.2)
    cal = _cal()
    for i in range(200):
        cal.observe(i / 200)
    before = cal.cut()
    share, metrics = _share(dead, cal, [0.0])
    await share.sync()
    await share.close()
    await dead.aclose()
    assert cal.cut() == before
    text = generate_latest(metrics.registry).decode()
    assert "llmgw_router_calibration_share_errors_total 1.0" in text
