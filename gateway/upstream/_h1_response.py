"""The lean HTTP/1.1 client's response and errors (the client itself: gateway.upstream.h1)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.upstream.h1 import _Conn

_HIGH_WATER = 1 << 20  # response bytes buffered unread before reading from the socket pauses


class H1Error(Exception):
    """A failure of the upstream exchange (not an HTTP error status: those are responses)."""


class ConnectFailed(H1Error):
    def __init__(self, host: str, port: int, error: OSError | TimeoutError) -> None:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or "timeout"
        super().__init__(f"cannot connect to {host}:{port}: {reason}")
        self.error = error


class Disconnected(H1Error):
    """The server closed the connection before the response was complete."""


class BadResponse(H1Error):
    """The server's bytes are not a response the gateway accepts: not HTTP/1.1, a content-encoding it
    did not ask for, a header block or an SSE event over its bound. The message holds the details
    (for the log); `reason` is what a client may be told."""

    def __init__(self, detail: str, reason: str = "a malformed HTTP response") -> None:
        super().__init__(detail)
        self.reason = reason


def check_encoding(value: str | None) -> None:
    """Refuse a compressed body: the gateway asks for `accept-encoding: identity` and relays bytes
    as they are, so a body in any other coding would reach the client undecodable."""
    if value is not None and value.strip().lower() not in ("", "identity"):
        raise BadResponse(f"content-encoding {value!r} was not asked for", "a compressed response")


class Response:
    """One response: `status` and `headers` once `H1Client.post` returns; the body by `read` or
    `readany`. Exactly one of `release` / `close` ends it."""

    __slots__ = (
        "status", "headers", "_conn", "_chunks", "_size", "_complete", "_error", "_waiter", "_timer",
        "_whole",
    )  # fmt: skip

    def __init__(self, conn: _Conn) -> None:
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self._conn: _Conn | None = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._complete = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._whole = False  # read() wants the whole body: never pause reading for it

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return value.decode("latin-1") if value is not None else None

    @property
    def complete(self) -> bool:
        return self._complete

    # -- fed by the connection ---------------------------------------------------------------
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _feed(self, body: bytes) -> None:
        self._chunks.append(body)
        self._size += len(body)
        if self._size > _HIGH_WATER and not self._whole and self._conn is not None:
            self._conn.pause()
        self._wake()

    def _finish(self) -> None:
        self._complete = True
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self._error is None and not self._complete:
            self._error = error
        self._wake()

    # -- read by the caller ------------------------------------------------------------------
    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def readany(self) -> bytes:
        """What has arrived since the last call (waiting for something); b"" once the body is done."""
        while not self._chunks:
            if self._complete:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        out = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        if self._conn is not None:
            self._conn.resume()
        return out

    async def read(self) -> bytes:
        """The whole body."""
        self._whole = True
        if self._conn is not None:
            self._conn.resume()
        while not self._complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        out = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        return out

    def release(self) -> None:
        """Done reading: a complete response gives its connection back for reuse, else closes it."""
        conn, self._conn = self._conn, None
        self._cancel_timer()
        if conn is not None:
            if self._complete and self._error is None:
                conn.reusable()
            else:
                conn.close()

    def close(self) -> None:
        """Drop the connection (the server sees the client leave and stops working on the request)."""
        conn, self._conn = self._conn, None
        self._cancel_timer()
        if conn is not None:
            conn.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        conn, self._conn = self._conn, None
        error = TimeoutError("the upstream exchange exceeded its total timeout")
        if conn is not None:
            conn._abort(error)  # wakes a caller waiting for headers or body with the timeout
        else:
            self._fail(error)
