"""Waiting in tests: poll a condition until it holds (readiness, scrapes, engine gauges, settlement),
never assert on elapsed time. The one polling helper of the test suite, in a blocking and an asyncio form
(the asyncio form for tests whose own event loop runs what is awaited)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["wait_until", "wait_until_async"]

T = TypeVar("T")
What = str | Callable[[], str]


def _timed_out(what: What, timeout: float) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")


def wait_until(
    check: Callable[[], T],
    what: What,
    *,
    timeout: float,
    interval: float = 0.2,
    fail: Callable[[], None] | None = None,
) -> T:
    """Poll `check()` until it is truthy and return that value; past `timeout` fail with what was awaited.
    A callable `what` is called only then, so it can report what the polls saw. `fail`, called before
    each poll, may raise to stop waiting early (e.g. the awaited process has exited)."""
    deadline = time.monotonic() + timeout
    while True:
        if fail is not None:
            fail()
        if value := check():
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout)
        time.sleep(interval)


async def wait_until_async(
    check: Callable[[], T | Awaitable[T]], what: What, *, timeout: float, interval: float = 0.1
) -> T:
    """`wait_until` for a test on an event loop: sleeps with `asyncio.sleep`, so the loop keeps running;
    `check` may be a coroutine function (e.g. one that pokes the gateway before it looks)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise _timed_out(what, timeout)
        await asyncio.sleep(interval)
