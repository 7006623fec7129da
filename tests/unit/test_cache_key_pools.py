"""A key restricted to some of an alias's pools never gets a cached answer another pool gave (issue 24,
item 6): the cut joins the cache scope; keys with the same cut share entries, unrestricted keys are as
before."""

from __future__ import annotations

from cache.exact import MemoryExactStore
from gateway.config import CacheConfig, Model, ModelCache, Policy, Pool, Route
from gateway.edge.exchange import Kind
from gateway.observability.metrics import Metrics
from gateway.relay.response_cache import CacheBackends, ResponseCache
from ratelimit.model import Tenant

TENANT = Tenant(key_id="k1", app="a", org="acme", tier="standard")
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def _cache() -> ResponseCache:
    policy = Policy(
        pools=[Pool(name="p", model="m", endpoints={"static": ["http://127.0.0.1:9"]})],
        models=[Model(name="m", route=Route(pool="p"), cache=ModelCache(scope="org"))],
        cache=CacheConfig(),
    )
    return ResponseCache(policy, CacheBackends(MemoryExactStore(1 << 20)), Metrics(policy))


def _key(cache: ResponseCache, allowed: frozenset[str]) -> str:
    look = cache.plan(Kind.CHAT, "m", BODY, None, TENANT, allowed)
    assert look is not None
    return look.key


def test_the_pools_a_key_may_use_split_the_cache_only_when_they_cut_the_alias() -> None:
    cache = _cache()
    unrestricted = _key(cache, frozenset())
    assert _key(cache, frozenset({"p", "q"})) == unrestricted  # every pool of the alias allowed
    cut = _key(cache, frozenset({"q"}))
    assert cut != unrestricted
    assert _key(cache, frozenset({"q", "r"})) == cut  # the same cut of this alias: shared
