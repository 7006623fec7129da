"""The disconnect watcher starts `WATCH_AFTER_S` into a pool call: none for a quick answer, and a client
that left before it started is still noticed (and its request's task cancelled)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.edge.exchange import WATCH_AFTER_S, Exchange, Kind, RequestHeaders


def _exchange() -> Exchange:
    return Exchange(b"req", Kind.CHAT, RequestHeaders({"headers": []}), 0.0)


class Channel:
    """An ASGI receive channel whose client has already left."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return {"type": "http.disconnect"}


async def test_a_quick_answer_never_starts_a_watcher() -> None:
    req = _exchange()
    channel = Channel()
    req.watch(channel)
    await asyncio.sleep(0)
    req.done()
    await asyncio.sleep(WATCH_AFTER_S * 2)
    assert channel.calls == 0 and req.watching is None and not req.client_gone


async def test_a_client_gone_before_the_watcher_starts_is_noticed() -> None:
    channel = Channel()

    async def pool_call() -> None:
        req = _exchange()
        req.watch(channel)
        try:
            await asyncio.sleep(5)  # a long generation
        finally:
            assert req.client_gone
            req.done()

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(pool_call(), 2)
    assert channel.calls == 1
