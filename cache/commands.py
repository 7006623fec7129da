"""The I/O the caches need, as protocols the gateway injects (design §2: `cache` never imports
`ratelimit`'s client or `router`'s encoder; the gateway hands in objects that fit)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

Arg = bytes | str | int


class Commands(Protocol):
    """One Redis command, its reply decoded as RESP (bytes, ints, lists); errors are redis-py's
    exception classes. `ratelimit.resp.RespClient` fits."""

    def execute(self, *args: Arg) -> Awaitable[Any]: ...


class Embedder(Protocol):
    """The semantic cache's text embedding (the router's encoder, shared with routing). Returns a
    unit-length float32 vector, or None when the text is longer than the encoder's window: an
    embedding of part of a question must not stand for all of it."""

    async def embed(self, text: str) -> Any | None: ...
