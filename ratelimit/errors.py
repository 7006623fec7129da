"""The one exception a backend raises when it cannot decide (the gateway applies fail_open/closed), and a
log that says each kind of failure at most once a minute.

Kept free of the Redis client: `ratelimit.model` (the config path) imports this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

# What went wrong, as `BackendUnavailable.reason` and the `reason` label of
# `llmgw_ratelimit_backend_errors_total`: a short, bounded vocabulary.
# The limiter operations a failure is counted under (the `op` label).
OPS = ("admit", "top_up", "settle", "renew", "load")
REASONS = ("timeout", "connection", "oom", "auth", "noperm", "moved", "readonly", "busy", "script", "other")


class BackendUnavailable(Exception):
    """The shared backend could not decide: unreachable, timed out, or any error reply but a refusal
    (out of memory, authentication, ACL, cluster redirect, read-only replica, loading, a script error).

    Raised instead of the client library's own errors so callers (`ratelimit.failover`, the gateway)
    depend on one type, whatever the backend. `reason` is one of `REASONS`; `op` the limiter operation
    that failed (`admit`, `top_up`, `settle`, `renew`, `load`).
    """

    def __init__(self, message: str, *, reason: str = "connection", op: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.op = op


class EveryMinute:
    """A log line per key at most once per `interval_s` (a failure repeated on every call must not flood
    the log); the lines dropped meanwhile are counted in the next one."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._next: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def __call__(self, key: str, level: int, msg: str, *args: object) -> bool:
        """Log `msg % args` unless `key` was logged less than `interval_s` ago; True if it was logged."""
        now = self._clock()
        if now < self._next.get(key, 0.0):
            self._dropped[key] = self._dropped.get(key, 0) + 1
            return False
        self._next[key] = now + self._interval
        dropped = self._dropped.pop(key, 0)
        suffix = f" ({dropped} more like it since the last report)" if dropped else ""
        self._log.log(level, msg + suffix, *args)
        return True

    def mark(self, key: str) -> None:
        """`key` was just reported some other way: its next line waits `interval_s`."""
        self._next[key] = self._clock() + self._interval


class UnsupportedBackend(Exception):
    """The shared backend is of a kind the limiter cannot work with (found at start-up): serving would
    fail every call, so the gateway refuses to start and says what is supported."""
