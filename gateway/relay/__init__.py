"""The request hot path: one `RequestContext` through named stages (see `pipeline`'s docstring and
docs/architecture.md). Public: `Relay` and what it is built from; `normalize` (the body for the
pool) and `response_cache` (the response cache as the relay uses it) are public modules too; the
stage modules (`_body`, `_cached`, `_admit`, `_unary`, `_stream`, `_context`) are internal.
"""

from __future__ import annotations

from gateway.relay.pipeline import Relay, RelayParts

__all__ = ["Relay", "RelayParts"]
