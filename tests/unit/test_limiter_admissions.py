"""`Admissions`: the renewal task outlives any error; a request that can never fit is a non-retryable
429 `request_too_large` (checked before any round trip, and for what a quota has left); each admission
carries its pool's failure mode."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest
import redis.exceptions as rexc
from prometheus_client import generate_latest

from gateway.budget.admission import Admissions
from gateway.config import default_policy
from gateway.errors import RateLimitError
from gateway.observability.metrics import Metrics
from ratelimit.memory_backend import MemoryBackend
from ratelimit.model import (
    Admission,
    Decision,
    Dimension,
    Level,
    LevelLimits,
    LimitsConfig,
    Reservation,
    Rule,
    Tenant,
    TierLimits,
    ceilings,
    over_limit,
)
from tests.support.prom import metric

TENANT = Tenant("k1", "app", "acme", "standard")


def config(lease_s: float = 30.0, **key: int) -> LimitsConfig:
    return LimitsConfig(lease_s=lease_s, tiers={"standard": TierLimits(key=LevelLimits(**key))})


def decisions(metrics: Metrics, outcome: str) -> float:
    return metric(
        generate_latest(metrics.registry).decode(), "llmgw_ratelimit_decisions_total", f'outcome="{outcome}"'
    )


class FlakyRenewals(MemoryBackend):
    """Renewals fail `failures` times (as a raw redis-py error, the worst case: not BackendUnavailable)."""

    def __init__(self, failures: int) -> None:
        super().__init__(lease_s=30)
        self.failures = failures
        self.renewed: list[int] = []
        self.admitted: list[Admission] = []

    async def admit(self, admission: Admission) -> Decision:
        self.admitted.append(admission)
        return await super().admit(admission)

    async def renew(self, reservations: Sequence[Reservation]) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise rexc.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
        self.renewed.append(len(reservations))
        await super().renew(reservations)


async def test_the_renewal_task_survives_errors_and_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics(default_policy())
    limiter = FlakyRenewals(failures=4)
    admissions = Admissions(config(lease_s=0.06), limiter, metrics)
    await admissions.admit("r1", TENANT, "p", 10, 10, False)
    with caplog.at_level(logging.WARNING, logger="llmgw.ratelimit"):
        task = asyncio.create_task(admissions.renew_forever())
        try:
            for _ in range(500):  # renewals every 20 ms: waits for them, asserts nothing about time
                if len(limiter.renewed) >= 2:
                    break
                await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert limiter.renewed[:2] == [1, 1]  # after four failed rounds, renewing again
    assert decisions(metrics, "renew_failed") == 4
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "OOM" in lines[0], lines  # at most once a minute per kind of error


def test_over_limit_names_the_tightest_enforced_rule() -> None:
    key = Rule(Level.KEY, "k", Dimension.TOKENS, 100_000)
    org = Rule(Level.ORG, "acme", Dimension.TOKENS, 50_000)
    shadow = Rule(Level.APP, "a", Dimension.TOKENS, 10, shadow=True)
    shared = Rule(Level.GLOBAL, "*", Dimension.INPUT_TOKENS, 1000, reserved_share=0.5)
    rules = (key, org, shadow, shared)
    cost = {Dimension.TOKENS: 60_000, Dimension.INPUT_TOKENS: 400}
    assert over_limit(ceilings(rules, "standard"), cost) == (org, 50_000, 60_000)
    assert over_limit(ceilings(rules, "standard"), {Dimension.TOKENS: 50_000}) is None  # equal fits
    small = {Dimension.TOKENS: 10, Dimension.INPUT_TOKENS: 600}
    assert over_limit(ceilings(rules, "standard"), small) == (shared, 500, 600)  # standard sees half
    assert over_limit(ceilings(rules, "premium"), small) is None


async def test_a_request_over_a_limit_is_refused_at_once_for_good() -> None:
    metrics = Metrics(default_policy())
    limiter = FlakyRenewals(0)
    admissions = Admissions(config(tokens_per_min=100_000), limiter, metrics)
    with pytest.raises(RateLimitError) as info:
        await admissions.admit("r1", TENANT, "p", 200_000, 16, False)
    err = info.value
    assert not limiter.admitted  # decided before any limiter call
    assert (err.status, err.code, err.param) == (429, "request_too_large", "key.tokens")
    assert "key 'k1' on tokens per minute" in err.message
    assert "200016 tokens" in err.message and "limit of 100000" in err.message
    headers = err.response_headers()
    assert headers["x-should-retry"] == "false" and "retry-after" not in headers
    assert "retry-after-ms" not in headers
    assert decisions(metrics, "too_large") == 1 and decisions(metrics, "refused") == 0


async def test_a_request_over_what_a_quota_has_left_is_too_large_a_minute_refusal_is_not() -> None:
    metrics = Metrics(default_policy())
    admissions = Admissions(config(tokens_per_day=1000, requests_per_min=2), FlakyRenewals(0), metrics)
    ticket = await admissions.admit("r1", TENANT, "p", 500, 200, False)
    admissions.settle(ticket, 500, 200)
    with pytest.raises(RateLimitError) as info:
        await admissions.admit("r2", TENANT, "p", 300, 100, False)  # 400 > 300 left today
    err = info.value
    assert (err.code, err.param) == ("request_too_large", "key.tokens_day")
    assert "400 tokens" in err.message and "300 of the limit of 1000" in err.message
    headers = err.response_headers()
    assert headers["x-should-retry"] == "false" and "retry-after" not in headers
    assert headers["x-ratelimit-limit-requests"] == "2"  # the usual headers are still there
    await admissions.admit("r3", TENANT, "p", 100, 100, False)  # fits what is left
    with pytest.raises(RateLimitError) as info:
        await admissions.admit("r4", TENANT, "p", 1, 1, False)  # the minute's 2 requests are used
    assert info.value.code == "rate_limit_exceeded" and "retry-after" in info.value.response_headers()
    assert decisions(metrics, "too_large") == 1 and decisions(metrics, "refused") == 1


async def test_each_admission_carries_its_pools_failure_mode() -> None:
    limiter = FlakyRenewals(0)
    modes: dict[str, Any] = {"hosted": "fail_closed", "gpu": "fail_open"}
    admissions = Admissions(config(), limiter, Metrics(default_policy()), modes)
    for rid, pool in (("a", "hosted"), ("b", "gpu"), ("c", "cache")):
        await admissions.admit(rid, TENANT, pool, 1, 1, False)
    assert [a.on_backend_error for a in limiter.admitted] == ["fail_closed", "fail_open", None]
