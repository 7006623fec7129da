from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pytest

from ratelimit.errors import BackendUnavailable
from ratelimit.failover import FailoverLimiter
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import Admission, Decision, Dimension, Reservation


class Down:
    async def admit(self, admission: Admission) -> Decision:
        raise BackendUnavailable("redis: ConnectionError: refused")

    async def top_up(self, reservation: Reservation, extra: Mapping[Dimension, int]) -> bool:
        raise BackendUnavailable("down")

    async def settle(self, reservation: Reservation, used: Mapping[Dimension, int]) -> None:
        raise BackendUnavailable("down")

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        raise BackendUnavailable("down")

    async def close(self) -> None:
        return None


async def test_fail_open_says_so_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    limiter = FailoverLimiter(Down(), MemoryBackend(lease_s=30), "fail_open")
    with caplog.at_level(logging.WARNING, logger="llmgw.ratelimit"):
        decision = await limiter.admit(Admission("r1", (), {Dimension.REQUESTS: 1}))
        await limiter.admit(Admission("r2", (), {Dimension.REQUESTS: 1}))
    assert decision.allowed and decision.degraded
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "fail_open" in lines[0] and "refused" in lines[0]  # once per outage
    assert limiter.stats.fail_open_activations == 1
