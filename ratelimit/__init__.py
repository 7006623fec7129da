"""Token-budget rate limiting: reserve at admission, settle to real usage, leases for crash safety.

Backend-neutral: `ratelimit.model` holds the contract (plain data + the `Limiter` protocol),
`ratelimit.rules` resolves which limits apply to a request, and the backends (`ratelimit.redis_backend`
with Lua under `ratelimit/lua/`, `ratelimit.memory_backend`) implement the same contract and pass the
same contract tests. Nothing here imports the gateway, FastAPI or eval.

Names are imported from their modules (no package facade, docs/design/018-layout.md): the contract
(`ratelimit.model`, `ratelimit.errors.BackendUnavailable`), the rule resolution and costs
(`ratelimit.rules`), and the backends and their machinery, which the config path (`import
ratelimit.model`) does not load (redis, hiredis, asyncio, the window arithmetic):
`ratelimit.memory_backend` (MemoryBackend), `ratelimit.redis_backend` (RedisBackend, SCRIPTS,
load_script), `ratelimit.resp` (RespClient), `ratelimit.failover` (FailoverLimiter, FailoverStats),
`ratelimit.keys` (the Redis key scheme: rule_key, derived_keys, encode_scope), `ratelimit.windows`
(period, Check). `python -m ratelimit.bench` is a command, not an API.
"""
