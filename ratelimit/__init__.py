"""Token-budget rate limiting: reserve at admission, settle to real usage, leases for crash safety.

Backend-neutral: `ratelimit.model` holds the contract (plain data + the `Limiter` protocol),
`ratelimit.rules` resolves which limits apply to a request, and the backends (`ratelimit.redis_backend`
with Lua under `ratelimit/lua/`, `ratelimit.memory_backend`) implement the same contract and pass the
same contract tests. Nothing here imports the gateway, FastAPI or eval.
"""

from __future__ import annotations
