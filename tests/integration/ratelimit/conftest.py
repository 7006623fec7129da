"""Fixtures of the limiter tests: a real redis-server per session, and one contract harness per backend.

The harness hides how time passes: the memory backend gets a fake clock that `advance` moves instantly;
the Redis backend uses the server clock, so `advance` really sleeps. Tests therefore use short
sub-windows / leases (constructor parameters of both backends) only where they watch something expire,
and keep every "still counted" assertion far (>= 0.5 s) from any expiry.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from contract_harness import Harness


# "redis": the Redis backend on redis-py (the gateway's default client); "resp": on the lean RESP client.
@pytest.fixture(params=["memory", "redis", "resp"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    url = None
    if request.param != "memory":
        url = request.getfixturevalue("redis_server").url
    # A fresh key prefix per test isolates tests sharing the session's redis-server.
    h = Harness(request.param, url, prefix=f"t{uuid.uuid4().hex[:16]}")
    yield h
    for limiter in h.made:
        await limiter.close()
