"""The I/O the caches need, as protocols the gateway injects (design §2: `cache` never imports
`ratelimit`'s client or `router`'s encoder; the gateway hands in objects that fit)."""

from __future__ import annotations

from typing import Any, Protocol

Arg = bytes | str | int | float


class Commands(Protocol):
    """One Redis command, its reply decoded as RESP (bytes, ints, lists); errors are redis-py's
    exception classes. `ratelimit.resp.RespClient` fits."""

    async def execute(self, *args: Arg) -> Any: ...
