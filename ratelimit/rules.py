"""Which limits apply to a request (pure): tier defaults, per-tenant overrides, global and pool levels,
the request's tags and end user, and run-time overrides on top of the policy's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ratelimit.keys import scope_id
from ratelimit.model import (
    SHARED_LEVELS,
    Dimension,
    Level,
    LevelLimits,
    LimitsConfig,
    Overrides,
    Rule,
    Tenant,
)

NO_OVERRIDES = Overrides()


def _over(limits: LevelLimits, *overrides: LevelLimits | None) -> LevelLimits:
    for o in overrides:
        if o is not None:
            limits = limits.merged(o)
    return limits


def resolve_rules(
    config: LimitsConfig, tenant: Tenant, pool: str, overrides: Overrides = NO_OVERRIDES
) -> tuple[Rule, ...]:
    tier = config.tiers.get(tenant.tier)
    if tier is None:
        raise KeyError(f"unknown tier '{tenant.tier}'")
    app = scope_id(tenant.org, tenant.app)
    levels: list[tuple[Level, str, LevelLimits]] = [
        # Every tenant scope escapes its parts (ratelimit.keys.scope_id): org `acme` / app `x/y` and
        # org `acme/x` / app `y` are different buckets.
        (
            Level.KEY,
            scope_id(tenant.key_id),
            _over(tier.key, tenant.key_limits, overrides.key.get(tenant.key_id)),
        ),
        (Level.APP, app, _over(tier.app, tenant.app_limits, overrides.app.get(app))),
        (Level.ORG, scope_id(tenant.org), _over(tier.org, tenant.org_limits, overrides.org.get(tenant.org))),
        (Level.GLOBAL, "*", config.global_),
    ]
    pool_limits = config.pools.get(pool)
    if pool_limits is not None:
        levels.append((Level.POOL, pool, pool_limits))
    return _rules(config, levels)


def request_rules(
    config: LimitsConfig,
    tenant: Tenant,
    tags: Iterable[str],
    end_user: str | None,
    overrides: Overrides = NO_OVERRIDES,
) -> tuple[Rule, ...]:
    """The rules a request adds to its key's: one set per tag it carries, and its end user's, when
    its app limits end users. Tags must be known (`known_tags`); the caller checked them."""
    levels: list[tuple[Level, str, LevelLimits]] = []
    for tag in tags:
        limits = _over(config.tags.get(tag, LevelLimits()), overrides.tag.get(tag))
        levels.append((Level.TAG, scope_id(tag), limits))
    if end_user is not None:
        app = scope_id(tenant.org, tenant.app)
        per_user = _over(tenant.end_user_limits or LevelLimits(), overrides.end_user.get(app))
        levels.append((Level.USER, scope_id(tenant.org, tenant.app, end_user), per_user))
    return _rules(config, levels) if levels else ()  # a level without limits adds no rule


def known_tags(config: LimitsConfig, overrides: Overrides = NO_OVERRIDES) -> Mapping[str, object]:
    """Every tag a request may carry: the policy's and those the admin API declared."""
    if not overrides.tag:
        return config.tags
    return {**config.tags, **overrides.tag}


def _rules(config: LimitsConfig, levels: list[tuple[Level, str, LevelLimits]]) -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for level, scope, limits in levels:
        share = config.premium_reserved_share if level in SHARED_LEVELS else 0.0
        for dim, limit, shadow in limits.items():
            rules.append(Rule(level, scope, dim, limit, shadow, share))
    return tuple(rules)


def request_cost(input_tokens: int, output_tokens: int, usd_micro: int = 0) -> dict[Dimension, int]:
    """What admitting a request reserves in every dimension (`usd_micro`: its worst-case cost; the
    dollar dimensions are left out when it is 0: every reader treats a missing dimension as 0)."""
    total = input_tokens + output_tokens
    cost = {
        Dimension.REQUESTS: 1,
        Dimension.INPUT_TOKENS: input_tokens,
        Dimension.OUTPUT_TOKENS: output_tokens,
        Dimension.TOKENS: total,
        Dimension.CONCURRENT: 1,
        Dimension.TOKENS_DAY: total,
        Dimension.TOKENS_MONTH: total,
    }
    if usd_micro:
        cost[Dimension.USD_DAY] = cost[Dimension.USD_MONTH] = cost[Dimension.USD_TOTAL] = usd_micro
    return cost


def usage_cost(input_tokens: int, output_tokens: int, usd_micro: int = 0) -> dict[Dimension, int]:
    """Real usage in every dimension (what settlement writes); the concurrency slot is released."""
    cost = request_cost(input_tokens, output_tokens, usd_micro)
    cost[Dimension.CONCURRENT] = 0
    return cost
