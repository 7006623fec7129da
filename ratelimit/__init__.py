"""Token-budget rate limiting: reserve at admission, settle to real usage, leases for crash safety.

Backend-neutral: `ratelimit.model` holds the contract (plain data + the `Limiter` protocol),
`ratelimit.rules` resolves which limits apply to a request, and the backends (`ratelimit.redis_backend`
with Lua under `ratelimit/lua/`, `ratelimit.memory_backend`) implement the same contract and pass the
same contract tests. Nothing here imports the gateway, FastAPI or eval.

Re-exported here: the contract (`ratelimit.model`, `BackendUnavailable`) and the rule resolution and
costs (`ratelimit.rules`), which add nothing measurable to `import ratelimit.model` (the gateway's
config loading). The backends and their machinery stay
in their modules, so that the config path does not load redis, hiredis, asyncio or the window
arithmetic: `ratelimit.memory_backend` (MemoryBackend), `ratelimit.redis_backend` (RedisBackend,
SCRIPTS, load_script), `ratelimit.resp` (RespClient), `ratelimit.failover` (FailoverLimiter,
FailoverStats), `ratelimit.keys` (the Redis key scheme: rule_key, derived_keys, encode_scope),
`ratelimit.windows` (period, Check). `python -m ratelimit.bench` is a command, not an API.
"""

from __future__ import annotations

from ratelimit.errors import BackendUnavailable
from ratelimit.model import (
    SUB_WINDOWS,
    Admission,
    Decision,
    Dimension,
    Level,
    LevelLimits,
    Limiter,
    LimitsConfig,
    Priority,
    Reservation,
    Rule,
    RuleState,
    Tenant,
    TierLimits,
)
from ratelimit.rules import request_cost, resolve_rules, usage_cost

__all__ = [
    "SUB_WINDOWS",
    "Admission",
    "BackendUnavailable",
    "Decision",
    "Dimension",
    "Level",
    "LevelLimits",
    "Limiter",
    "LimitsConfig",
    "Priority",
    "Reservation",
    "Rule",
    "RuleState",
    "Tenant",
    "TierLimits",
    "request_cost",
    "resolve_rules",
    "usage_cost",
]
