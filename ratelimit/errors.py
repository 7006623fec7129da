"""The one exception a backend raises when it cannot decide (the gateway applies fail_open/closed)."""

from __future__ import annotations


class BackendUnavailable(Exception):
    """The shared backend did not answer in time (connection refused/reset, timeout, loading, read-only).

    Raised instead of the client library's own errors so callers (`ratelimit.failover`, the gateway)
    depend on one type, whatever the backend.
    """
