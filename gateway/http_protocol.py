"""uvicorn's httptools protocol, writing a response's head together with its first body bytes.

uvicorn writes the status line and headers to the socket when the app sends `http.response.start`,
and the body on `http.response.body`: two `send` syscalls per unary answer. On loopback and on a
pod network, a socket write is the most expensive thing the relay does per request (profiled with
py-spy: the two response writes were ~13 % of the gateway's CPU at saturation, each about as costly
as all of admission's Python). Here the head of a response that declares its `content-length` is
held and goes out with the body in one write; the client cannot act on a head without its body
anyway. Everything else (parsing, keep-alive, pipelining, flow control, `100 Continue`, shutdown,
streams, which are `transfer-encoding: chunked` and flushed as they come) is uvicorn's own code:
the cycle's `send` runs unchanged against a stand-in transport that collects what it writes.

Used by `gateway.server` (`uvicorn.run(..., http=CoalescingHttpToolsProtocol)`); the
`LLMGW_HTTP_COALESCE=false` setting runs uvicorn's stock protocol instead.
"""

from __future__ import annotations

from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _Collect:
    """The transport as uvicorn's `send` sees it around a held response head: writes are collected
    behind `prefix` (the held head, if any); `flush` writes them all at once. A `close` flushes
    first, so uvicorn's order (last bytes, then close, then its completion callback) is kept."""

    __slots__ = ("_real", "chunks", "flushed")

    def __init__(self, real: Any, prefix: bytes | None) -> None:
        self._real = real
        self.chunks: list[bytes] = [prefix] if prefix is not None else []
        self.flushed = False

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def flush(self) -> None:
        self.flushed = True
        if self.chunks and not self._real.is_closing():
            self._real.write(b"".join(self.chunks))
        self.chunks = []

    def close(self) -> None:
        self.flush()
        self._real.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _declares_length(message: ASGISendEvent) -> bool:
    for name, _ in message.get("headers", ()):  # type: ignore[attr-defined]
        if name.lower() == b"content-length":
            return True
    return False


class _CoalescingCycle(RequestResponseCycle):
    """A request's cycle whose unary response head waits for the body (see the module docstring)."""

    _head: bytes | None = None

    async def send(self, message: ASGISendEvent) -> None:
        head = self._head
        if head is None and (
            message["type"] != "http.response.start"
            or self.response_started
            or self.scope["method"] == "HEAD"
            or not _declares_length(message)
        ):
            await super().send(message)
            return
        real = self.transport
        collect = _Collect(real, head)
        self._head = None
        self.transport = collect  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = real
        if head is None and not collect.flushed:
            self._head = b"".join(collect.chunks)  # the head: held until the body comes
        else:
            collect.flush()


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose request cycles are `_CoalescingCycle`s."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # The new cycle's task is scheduled, not started: its `send` is looked up when it runs.
        if cycle is not None and type(cycle) is RequestResponseCycle:
            cycle.__class__ = _CoalescingCycle
