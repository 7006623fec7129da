"""When the relay may overlap admission with the pool call (`Admissions.may_speculate`), and how the
speculative admissions are counted. The limiter is an in-process fake returning crafted decisions; the
end-to-end behaviour (real Redis, two gateways, an aborted pool call) is tests/e2e/limits/test_speculative.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.budget.admission import Admissions
from gateway.config import default_policy
from gateway.errors import RateLimitError
from gateway.observability.metrics import Metrics
from ratelimit.model import (
    Admission,
    Decision,
    Dimension,
    Level,
    LimitsConfig,
    Reservation,
    Rule,
    RuleState,
    Tenant,
)

TOKENS = Rule(Level.ORG, "acme", Dimension.TOKENS, 1000)
REQUESTS = Rule(Level.KEY, "k1", Dimension.REQUESTS, 100)
SHADOW = Rule(Level.GLOBAL, "*", Dimension.TOKENS, 1000, shadow=True)
TENANT = Tenant(key_id="k1", app="acme/app", org="acme", tier="standard")


class FakeLimiter:
    """Answers each admission with the next scripted decision."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def next(self, allowed: bool = True, degraded: bool = False, **remaining: int) -> None:
        states = tuple(
            RuleState(rule, remaining.get(name, rule.limit), 60.0)
            for name, rule in (("tokens", TOKENS), ("requests", REQUESTS), ("shadow", SHADOW))
        )
        reservation = Reservation("r", (TOKENS,), {Dimension.TOKENS: 1}, "standard") if allowed else None
        self.decisions.append(
            Decision(allowed, reservation, states, None if allowed else TOKENS, 1.0, (), degraded)
        )

    async def admit(self, admission: Admission) -> Decision:
        return self.decisions.pop(0)

    def __getattr__(self, name: str) -> Any:  # settle, top_up, renew: not exercised here
        raise AssertionError(f"unexpected limiter call {name}")


def admissions(limiter: FakeLimiter, **speculative: Any) -> Admissions:
    config = LimitsConfig.model_validate({"backend": "redis", "speculative": speculative})
    return Admissions(config, limiter, Metrics(default_policy()))


async def admit(a: Admissions, request_id: str = "req") -> None:
    await a.admit(request_id, TENANT, "pool", 10, 10, False)


async def test_off_unless_enabled_with_a_remote_backend() -> None:
    limiter = FakeLimiter()
    off = admissions(limiter)
    limiter.next()
    await admit(off)
    assert not off.may_speculate(TENANT, 1)
    memory = Admissions(
        LimitsConfig.model_validate({"backend": "memory", "speculative": {"enabled": True}}),
        limiter,
        Metrics(default_policy()),
    )
    limiter.next()
    await admit(memory)
    assert not memory.may_speculate(TENANT, 1)


async def test_needs_a_recent_admission_with_headroom_at_every_enforced_rule() -> None:
    limiter = FakeLimiter()
    a = admissions(limiter, enabled=True, min_headroom=0.2)
    assert not a.may_speculate(TENANT, 1)  # nothing known about the key yet
    limiter.next(tokens=200, requests=20, shadow=0)  # exactly 20 % left; a shadow rule never counts
    await admit(a)
    assert a.may_speculate(TENANT, 1)
    assert not a.may_speculate(Tenant(key_id="k2", app="acme/app", org="acme", tier="standard"), 1)
    limiter.next(tokens=900, requests=19)  # one rule below 20 %: stop speculating
    await admit(a)
    assert not a.may_speculate(TENANT, 1)
    limiter.next()
    await admit(a)
    assert a.may_speculate(TENANT, 1)
    limiter.next(allowed=False)  # a refusal forgets the key's headroom
    with pytest.raises(RateLimitError):
        await admit(a)
    assert not a.may_speculate(TENANT, 1)
    limiter.next(degraded=True)  # fail-open decisions say nothing about the shared budget
    await admit(a)
    assert not a.may_speculate(TENANT, 1)


async def test_not_while_more_than_max_inflight_requests_run_here() -> None:
    limiter = FakeLimiter()
    a = admissions(limiter, enabled=True, max_inflight=2)
    limiter.next()
    await admit(a, "r1")
    assert a.may_speculate(TENANT, 1)
    assert a.may_speculate(TENANT, 2)  # this request and one more
    assert not a.may_speculate(TENANT, 3)  # a busy loop gains nothing from overlapping the round trip


async def test_knowledge_expires_after_memory_s() -> None:
    limiter = FakeLimiter()
    a = admissions(limiter, enabled=True, memory_s=0.05)
    limiter.next()
    await admit(a)
    assert a.may_speculate(TENANT, 1)
    time.sleep(0.06)
    assert not a.may_speculate(TENANT, 1)


async def test_speculative_outcomes_are_counted() -> None:
    limiter = FakeLimiter()
    metrics = Metrics(default_policy())
    config = LimitsConfig.model_validate({"backend": "redis", "speculative": {"enabled": True}})
    a = Admissions(config, limiter, metrics)
    limiter.next()
    limiter.next(allowed=False)
    granted = a.speculate(a.admit("r1", TENANT, "pool", 10, 10, False))
    refused = a.speculate(a.admit("r2", TENANT, "pool", 10, 10, False))
    await asyncio.wait([granted, refused])
    assert granted.result().input_estimate == 10
    assert isinstance(refused.exception(), RateLimitError)
    sample = metrics.registry.get_sample_value
    assert sample("llmgw_ratelimit_speculative_total", {"outcome": "admitted"}) == 1
    assert sample("llmgw_ratelimit_speculative_total", {"outcome": "refused"}) == 1


def test_config_rejects_bad_values() -> None:
    for bad in ({"min_headroom": 0}, {"min_headroom": 1}, {"memory_s": 0}, {"max_inflight": 0}, {"nope": 1}):
        with pytest.raises(ValueError):
            LimitsConfig.model_validate({"speculative": bad})
