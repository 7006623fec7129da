"""Waiting in tests: poll a condition until it holds (scrapes, engine gauges, settlement), never assert on
elapsed time."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    check: Callable[[], object], what: str | Callable[[], str], *, timeout: float, interval: float = 0.2
) -> None:
    """Poll `check()` until it is truthy; past `timeout` fail with what was awaited. A callable `what`
    is called only then, so it can report what the polls saw."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}"
            )
        time.sleep(interval)
