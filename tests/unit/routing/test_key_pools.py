"""A key's allowed pools cut a routed alias's plan before any call, and refuse aliases they do not serve
(issue 24, item 6): a key allowed only the small pool cannot reach the large one through `auto`."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.config import parse_policy
from gateway.edge.exchange import Kind, RequestHeaders
from gateway.errors import PermissionDeniedError
from gateway.observability.metrics import Metrics
from gateway.routing.aliases import build_routed
from gateway.routing.table import Routes
from gateway.upstream.pool_client import PoolClient
from router.config import RoutingPolicy
from router.plan import Step
from router.policy import plan_route

FOUR = RoutingPolicy.model_validate({"tiers": [{"pool": p} for p in ("a", "b", "c", "s")]})
CASCADE = RoutingPolicy.model_validate(
    {"tiers": [{"pool": p} for p in ("a", "b", "c", "s")], "cascade": {"scorers": [{"kind": "trained"}]}}
)
CUTS = (0.3, 0.6, 0.9)


def tiers(steps: tuple[Step, ...]) -> list[tuple[int, ...]]:
    return [s.tiers for s in steps]


def test_a_hard_prompt_is_capped_at_the_strongest_allowed_tier() -> None:
    plan = plan_route(FOUR, 0.95, thresholds=CUTS, allowed_tiers={0, 1})
    assert tiers(plan.steps) == [(1,)]
    assert plan.start_tier == 3 and "allowed_tiers" in plan.notes
    assert tiers(plan_route(FOUR, 0.95, thresholds=CUTS).steps) == [(3,)]  # unrestricted: the strong tier


def test_failover_and_cascade_steps_keep_only_allowed_tiers() -> None:
    assert tiers(plan_route(FOUR, 0.0, thresholds=CUTS, allowed_tiers={0, 2}).steps) == [(0,), (2,)]
    plan = plan_route(CASCADE, 0.0, thresholds=CUTS, allowed_tiers={1, 2})
    assert plan.cascade and tiers(plan.steps) == [(1,), (2,)]
    assert all(c.tier in {1, 2} for s in plan.steps for c in s.calls)


def test_allowed_tiers_above_the_start_are_kept() -> None:
    assert tiers(plan_route(FOUR, 0.7, thresholds=CUTS, allowed_tiers={1, 3}).steps) == [(3,)]


def test_no_allowed_tier_is_an_error_and_none_means_all() -> None:
    with pytest.raises(ValueError):
        plan_route(FOUR, 0.5, thresholds=CUTS, allowed_tiers=set())
    assert plan_route(FOUR, 0.5, thresholds=CUTS, allowed_tiers=None) == plan_route(
        FOUR, 0.5, thresholds=CUTS
    )


POLICY = """\
pools:
  - {name: small, model: s, endpoints: {static: ["http://127.0.0.1:9"]}}
  - {name: large, model: l, endpoints: {static: ["http://127.0.0.1:9"]}}
models:
  - {name: small, route: {pool: small}}
  - {name: large, route: {pool: large}}
  - name: auto
    route: {policy: {tiers: [{pool: small}, {pool: large}], fallback_tier: 1}}
"""


@pytest.fixture
def routes() -> Routes:
    policy = parse_policy(POLICY, "test")
    pools = {p.name: PoolClient.build(p) for p in policy.pools}
    return Routes(policy, pools, Metrics(policy), build_routed(policy, logging.getLogger("test")))


BODY: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "prove P != NP"}]}
HEADERS = RequestHeaders({"headers": []})


async def test_routed_alias_answers_from_the_allowed_pool_only(routes: Routes) -> None:
    routes.check_pools("auto", frozenset({"small"}))  # one of its tiers is allowed: not refused
    decided = await routes.decide(Kind.CHAT, "auto", BODY, HEADERS, frozenset({"small"}))
    assert decided.first.pool.config.name == "small"
    assert {decided.routes[c.tier].pool.config.name for s in decided.plan.steps for c in s.calls} == {"small"}
    unrestricted = await routes.decide(Kind.CHAT, "auto", BODY, HEADERS)
    assert unrestricted.first.pool.config.name == "large"


@pytest.mark.parametrize(("alias", "allowed"), [("large", {"small"}), ("auto", {"elsewhere"})])
async def test_alias_without_an_allowed_pool_is_403_naming_it(
    routes: Routes, alias: str, allowed: set[str]
) -> None:
    with pytest.raises(PermissionDeniedError) as ei:
        routes.check_pools(alias, frozenset(allowed))
    err = ei.value
    assert err.status == 403 and err.code == "pool_not_allowed" and f"'{alias}'" in err.message
    assert set(err.payload()["error"]) == {"message", "type", "param", "code"}
    if alias == "auto":
        with pytest.raises(PermissionDeniedError):
            await routes.decide(Kind.CHAT, "auto", BODY, HEADERS, frozenset(allowed))


def test_direct_alias_on_an_allowed_pool_and_no_restriction_pass(routes: Routes) -> None:
    routes.check_pools("small", frozenset({"small"}))
    routes.check_pools("large", frozenset())
