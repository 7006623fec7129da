"""Which limits apply to a request (pure): tier defaults, per-tenant overrides, global and pool levels."""

from __future__ import annotations

from ratelimit.keys import scope_id
from ratelimit.model import SHARED_LEVELS, Dimension, Level, LevelLimits, LimitsConfig, Rule, Tenant


def resolve_rules(config: LimitsConfig, tenant: Tenant, pool: str) -> tuple[Rule, ...]:
    tier = config.tiers.get(tenant.tier)
    if tier is None:
        raise KeyError(f"unknown tier '{tenant.tier}'")
    levels: list[tuple[Level, str, LevelLimits]] = [
        # Every tenant scope escapes its parts (ratelimit.keys.scope_id): org `acme` / app `x/y` and
        # org `acme/x` / app `y` are different buckets.
        (Level.KEY, scope_id(tenant.key_id), tier.key.merged(tenant.key_limits)),
        (Level.APP, scope_id(tenant.org, tenant.app), tier.app.merged(tenant.app_limits)),
        (Level.ORG, scope_id(tenant.org), tier.org.merged(tenant.org_limits)),
        (Level.GLOBAL, "*", config.global_),
    ]
    pool_limits = config.pools.get(pool)
    if pool_limits is not None:
        levels.append((Level.POOL, pool, pool_limits))
    rules: list[Rule] = []
    for level, scope, limits in levels:
        share = config.premium_reserved_share if level in SHARED_LEVELS else 0.0
        for dim, limit, shadow in limits.items():
            rules.append(Rule(level, scope, dim, limit, shadow, share))
    return tuple(rules)


def request_cost(input_tokens: int, output_tokens: int) -> dict[Dimension, int]:
    """What admitting a request reserves in every dimension."""
    total = input_tokens + output_tokens
    return {
        Dimension.REQUESTS: 1,
        Dimension.INPUT_TOKENS: input_tokens,
        Dimension.OUTPUT_TOKENS: output_tokens,
        Dimension.TOKENS: total,
        Dimension.CONCURRENT: 1,
        Dimension.TOKENS_DAY: total,
        Dimension.TOKENS_MONTH: total,
    }


def usage_cost(input_tokens: int, output_tokens: int) -> dict[Dimension, int]:
    """Real usage in every dimension (what settlement writes); the concurrency slot is released."""
    cost = request_cost(input_tokens, output_tokens)
    cost[Dimension.CONCURRENT] = 0
    return cost
