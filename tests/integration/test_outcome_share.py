"""SharedOutcomes against a real redis-server: outcomes reach the other replica's memory (not their own
twice), a new replica warms up from the stream, hostile stream entries teach nothing, and Redis going
away is counted, never raised."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import generate_latest

from gateway.config import default_policy
from gateway.observability.metrics import Metrics
from gateway.routing.learning import Learning
from gateway.routing.outcome_share import SharedOutcomes
from router.config import RoutingPolicy
from router.memory import to_record
from tests.support.poll import wait_until_async
from tests.support.procs import free_port

DIM = 8
POLICY = RoutingPolicy.model_validate(
    {"tiers": [{"pool": "s"}, {"pool": "l"}], "difficulty": {"memory": {"capacity": 50, "k": 4}}}
)

STREAM = "t:outcomes:{outcomes}:auto"  # the prefix `t:`, alias `auto` (one hash tag for every stream)


def _replica(client: aioredis.Redis) -> tuple[Learning, SharedOutcomes, Metrics]:
    metrics = Metrics(default_policy())
    learning = Learning("auto", POLICY, DIM, metrics)
    return learning, SharedOutcomes(client, {"auto": learning}, metrics, "t:", interval_s=0.02), metrics


def _emb(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM).astype(np.float32)


async def test_outcomes_reach_the_other_replica_once_and_a_new_one_warms_up(
    redis_client: aioredis.Redis,
) -> None:
    client = redis_client
    a, share_a, _ = _replica(client)
    b, share_b, _ = _replica(client)
    await share_a.start()
    await share_b.start()
    try:
        a.learn(_emb(1), 0.0, "explore")  # needed the strong tier
        b.learn(_emb(2), 1.0, "feedback")
        assert a.memory is not None and b.memory is not None
        await wait_until_async(
            lambda: len(a.memory) == 2 and len(b.memory) == 2,  # type: ignore[union-attr]
            "both memories to hold both outcomes",
            timeout=3.0,
            interval=0.02,
        )
        await asyncio.sleep(0.1)  # a few more polls: nothing is added twice
        assert len(a.memory) == 2 and len(b.memory) == 2
    finally:
        await share_a.close()
        await share_b.close()
    c, share_c, _ = _replica(client)
    await share_c.start()
    try:
        assert c.memory is not None and len(c.memory) == 2
        hood = c.memory.neighbourhood(_emb(1))
        assert hood is not None and hood.labels[0] == pytest.approx(1.0)
    finally:
        await share_c.close()


async def test_hostile_stream_entries_teach_nothing(redis_client: aioredis.Redis) -> None:
    client = redis_client
    good = to_record(_emb(3), 0.25)
    await client.xadd(STREAM, {b"r": b"x", b"o": b"\x00" * 7})  # not a record
    await client.xadd(STREAM, {b"r": b"x", b"o": to_record(np.ones(DIM + 2, np.float32), 0.5)})
    await client.xadd(STREAM, {b"r": b"x", b"o": good[:-4] + b"\x00\x00\xc0\x7f"})  # NaN label
    await client.xadd(STREAM, {b"r": b"x"})  # no record at all
    await client.xadd(STREAM, {b"r": b"x", b"o": good})
    learning, share, _ = _replica(client)
    await share.start()
    try:
        assert learning.memory is not None and len(learning.memory) == 1
    finally:
        await share.close()


async def test_redis_gone_is_counted_and_learning_goes_on() -> None:
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.2)
    learning, share, metrics = _replica(dead)
    await share.start()  # the warm-up fails: start with what is local
    try:
        learning.learn(_emb(4), 1.0, "explore")
        await asyncio.sleep(0.1)
        assert learning.memory is not None and len(learning.memory) == 1
        text = generate_latest(metrics.registry).decode()
        errors = [ln for ln in text.splitlines() if ln.startswith("llmgw_router_outcome_share_errors_total ")]
        assert errors and float(errors[0].split()[1]) >= 2
    finally:
        await share.close()
        await dead.aclose()
