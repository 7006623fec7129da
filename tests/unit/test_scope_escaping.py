"""Tenant scopes escape each part (org, app, key): two tenants whose joined names coincide never share
a cache entry or a limiter bucket (issue 24, item 5)."""

from __future__ import annotations

import pytest

from cache.exact import MemoryExactStore
from gateway.config import CacheConfig, Model, ModelCache, Policy, Pool, Route
from gateway.edge.exchange import Kind
from gateway.observability.metrics import Metrics
from gateway.relay.response_cache import CacheBackends, ResponseCache
from ratelimit.keys import rule_key, scope_id
from ratelimit.model import Level, LevelLimits, LimitsConfig, Tenant, TierLimits
from ratelimit.rules import resolve_rules

# The colliding pair of the red-team run: `acme` + `x/y` and `acme/x` + `y` both join to `acme/x/y`.
FIRST = Tenant(key_id="k1", app="x/y", org="acme", tier="standard")
SECOND = Tenant(key_id="k2", app="y", org="acme/x", tier="standard")
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_scope_id_is_injective_in_its_parts() -> None:
    assert scope_id("acme", "x/y") != scope_id("acme/x", "y")
    assert scope_id("acme", "x/y") == "acme/x%2Fy"
    assert scope_id("a%2Fb") != scope_id("a/b")  # `%` is escaped too


def _policy(scope: str) -> Policy:
    return Policy(
        pools=[Pool(name="p", model="m", endpoints={"static": ["http://127.0.0.1:9"]})],
        models=[Model(name="m", route=Route(pool="p"), cache=ModelCache(scope=scope))],
        cache=CacheConfig(),
    )


@pytest.mark.parametrize("scope", ["app", "org"])
def test_colliding_tenants_get_different_cache_keys(scope: str) -> None:
    policy = _policy(scope)
    cache = ResponseCache(policy, CacheBackends(MemoryExactStore(1 << 20)), Metrics(policy))
    first = cache.plan(Kind.CHAT, "m", BODY, None, FIRST)
    second = cache.plan(Kind.CHAT, "m", BODY, None, SECOND)
    assert first is not None and second is not None
    assert first.key != second.key
    # Same tenant, same request: the same key (the cache still works).
    again = cache.plan(Kind.CHAT, "m", BODY, None, FIRST)
    assert again is not None and again.key == first.key


def test_colliding_tenants_get_different_limiter_keys() -> None:
    limits = LevelLimits(tokens_per_min=1000)
    config = LimitsConfig(tiers={"standard": TierLimits(key=limits, app=limits, org=limits)})
    keys = []
    for tenant in (FIRST, SECOND):
        rules = resolve_rules(config, tenant, "p")
        keys.append({r.level: rule_key("llmgw", r) for r in rules})
    assert keys[0][Level.APP] != keys[1][Level.APP]
    assert keys[0][Level.ORG] != keys[1][Level.ORG]
    assert keys[0][Level.APP] == "llmgw:{llmgw}:app:acme%2Fx%252Fy:tokens"
    assert keys[1][Level.APP] == "llmgw:{llmgw}:app:acme%252Fx%2Fy:tokens"
