"""An alias's `route.hosted_tools`: what a Responses request's hosted tools (web search, file search, ...)
get on it, `drop` unless the policy says `reject`; anything else is refused naming file and key."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, Route, default_policy, parse_policy

BASE = """\
pools:
  - name: p
    model: m
    endpoints: {static: ["http://127.0.0.1:8001"]}
models:
  - {name: m, route: ROUTE}
"""


def policy(route: str) -> str:
    return BASE.replace("ROUTE", route)


def test_drop_is_the_default() -> None:
    assert parse_policy(policy("{pool: p}"), "p.yaml").models[0].route.hosted_tools == "drop"
    assert all(model.route.hosted_tools == "drop" for model in default_policy().models)
    assert Route(pool="p").hosted_tools == "drop"


@pytest.mark.parametrize("value", ["drop", "reject"])
def test_either_policy_is_taken(value: str) -> None:
    route = parse_policy(policy(f"{{pool: p, hosted_tools: {value}}}"), "p.yaml").models[0].route
    assert route.hosted_tools == value and route.pools == ("p",)


@pytest.mark.parametrize("value", ["allow", "Drop", "true", "[drop]"])
def test_another_value_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(policy(f"{{pool: p, hosted_tools: {value}}}"), "p.yaml")
    assert "p.yaml:6: models[0].route.hosted_tools:" in str(caught.value)
    assert "'drop' or 'reject'" in str(caught.value)


def test_the_route_stays_frozen() -> None:
    route = Route(pool="p", hosted_tools="reject")
    with pytest.raises(ValueError):
        route.hosted_tools = "drop"  # type: ignore[misc]
