"""What a policy's sections say about each other: names that must exist (pools, tiers, models, SLO
classes) and names that must not repeat. Checked after the models validate, each problem with its key
path (gateway.config.parse_policy renders it with the file's line)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.config_drift import drift_references
from gateway.config_guardrails import Problems, guard_references
from gateway.config_lora import lora_problems
from gateway.config_route import speculative_problems

if TYPE_CHECKING:
    from gateway.config import Policy, Tenancy

__all__ = ["CACHE_POOL", "references"]

# The `pool` label of requests answered from the response cache (no pool did any work); re-exported
# by gateway.config.
CACHE_POOL = "cache"


def references(policy: Policy) -> list[tuple[tuple[str | int, ...], str]]:
    """Cross-references pydantic cannot see: unique names, routes to existing pools."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    pool_names: set[str] = set()
    for i, p in enumerate(policy.pools):
        if p.name in pool_names:
            problems.append((("pools", i, "name"), f"duplicate pool name '{p.name}'"))
        if p.name == CACHE_POOL:
            problems.append((("pools", i, "name"), f"'{CACHE_POOL}' is reserved (cache hits' pool label)"))
        pool_names.add(p.name)
    by_name = {p.name: p for p in policy.pools}
    model_names: set[str] = set()
    tiers = set(policy.limits.tiers)
    for i, m in enumerate(policy.models):
        if m.name in model_names:
            problems.append((("models", i, "name"), f"duplicate model name '{m.name}'"))
        model_names.add(m.name)
        if m.route.pool is not None and m.route.pool not in pool_names:
            problems.append(
                (
                    ("models", i, "route", "pool"),
                    f"unknown pool '{m.route.pool}' (pools: {sorted(pool_names)})",
                )
            )
        for j, tier in enumerate(m.route.policy.tiers if m.route.policy is not None else ()):
            if tier.pool not in pool_names:
                problems.append(
                    (
                        ("models", i, "route", "policy", "tiers", j, "pool"),
                        f"unknown pool '{tier.pool}' (pools: {sorted(pool_names)})",
                    )
                )
        problems += speculative_problems(i, m.route, by_name) + lora_problems(i, m.route, by_name)
        x = m.route.policy.explore if m.route.policy is not None else None
        if x is not None and x.tier not in tiers:  # exploration is charged to a tenancy tier's limits
            problems.append((("models", i, "route", "policy", "explore", "tier"), f"unknown tier '{x.tier}'"))
        if m.slo_class is not None and m.slo_class not in policy.slo_classes:
            problems.append((("models", i, "slo_class"), f"unknown SLO class '{m.slo_class}'"))
    for name in policy.limits.pools:
        if name not in pool_names:
            problems.append((("limits", "pools", name), f"unknown pool '{name}'"))
    problems += drift_references(policy.drift, policy.pools)
    guards = guard_references(policy.guardrails, [m.guardrails for m in policy.models], tiers)
    return problems + guards + _tenancy_references(policy.tenancy, tiers, pool_names, model_names)


def _tenancy_references(
    tenancy: Tenancy, tiers: set[str], pool_names: set[str], model_names: set[str]
) -> Problems:
    """The tenancy section's references to tiers, pools and models; duplicate key ids and orgs."""
    problems: Problems = []
    if tenancy.anonymous_tier not in tiers:
        problems.append((("tenancy", "anonymous_tier"), f"unknown tier '{tenancy.anonymous_tier}'"))
    key_ids: set[str] = set()
    for i, k in enumerate(tenancy.keys):
        if k.tier not in tiers:
            problems.append(
                (("tenancy", "keys", i, "tier"), f"unknown tier '{k.tier}' (tiers: {sorted(tiers)})")
            )
        for alias in sorted(k.models - model_names):
            problems.append((("tenancy", "keys", i, "models"), f"unknown model '{alias}'"))
        for pool in sorted(k.pools - pool_names):
            problems.append((("tenancy", "keys", i, "pools"), f"unknown pool '{pool}'"))
        if k.id in key_ids:
            problems.append((("tenancy", "keys", i, "id"), f"duplicate key id '{k.id}'"))
        key_ids.add(k.id)
    for tier, pools in tenancy.tier_pools.items():
        if tier not in tiers:
            problems.append((("tenancy", "tier_pools", tier), f"unknown tier '{tier}'"))
        for pool in sorted(pools - pool_names):
            problems.append((("tenancy", "tier_pools", tier), f"unknown pool '{pool}'"))
    org_names: set[str] = set()
    for i, o in enumerate(tenancy.orgs):
        if o.name in org_names:
            problems.append((("tenancy", "orgs", i, "name"), f"duplicate org '{o.name}'"))
        org_names.add(o.name)
    return problems
