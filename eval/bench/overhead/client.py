"""The measured request and a lean HTTP/1.1 client to send it.

One keep-alive connection per worker, an asyncio Protocol, no framework, so that the client adds as little
as possible (and the same) to both sides of the comparison.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

MODEL = "small"
STREAM_TOKENS = 8
CHAT_PATH = "/v1/chat/completions"


def request_body(stream: bool) -> bytes:
    """The measured request: a short chat turn answered with exactly STREAM_TOKENS tokens.

    `ignore_eos` (a vLLM extension the simulator honours) makes the answer length fixed, so direct and
    gateway answers are the same size; the gateway passes unknown fields through.
    """
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
        "max_tokens": STREAM_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def raw_request(port: int, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """The request bytes; `headers` are extra header lines (the limiter gateway's `Authorization`)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (
        f"POST {CHAT_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def count_sse_events(body: bytes) -> int:
    """Data events in an SSE body, not counting the final `[DONE]` (the role chunk counts)."""
    return body.count(b"data: ") - body.count(b"data: [DONE]")


class HTTPError(Exception):
    pass


class _ClientConn(asyncio.Protocol):
    __slots__ = (
        "transport", "port", "_buf", "_fut", "_head_end", "_length", "_chunked", "_pos", "_body", "_status",
    )  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.port = 0  # the server's, to reconnect to
        self._buf = bytearray()
        self._fut: asyncio.Future[tuple[int, bytes]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._head_end = -1
        self._length = -1
        self._chunked = False
        self._pos = 0
        self._body = bytearray()
        self._status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_exception(HTTPError(f"connection lost: {exc}"))

    def request(self, raw: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None and (self._fut is None or self._fut.done())
        self._fut = asyncio.get_running_loop().create_future()
        self._reset()
        self.transport.write(raw)
        return self._fut

    def data_received(self, data: bytes) -> None:
        self._buf += data
        try:
            done = self._parse()
        except (ValueError, HTTPError) as exc:
            if self._fut is not None and not self._fut.done():
                self._fut.set_exception(HTTPError(str(exc)))
            return
        if done and self._fut is not None and not self._fut.done():
            self._fut.set_result((self._status, bytes(self._body)))

    def _parse(self) -> bool:
        buf = self._buf
        if self._head_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(buf[:end]).lower()
            self._status = int(head[9:12])
            self._head_end = end + 4
            self._pos = self._head_end
            m = re.search(rb"\r\ncontent-length:\s*(\d+)", head)
            if m:
                self._length = int(m.group(1))
            elif b"\r\ntransfer-encoding: chunked" in head:
                self._chunked = True
            else:
                raise HTTPError("response has neither content-length nor chunked encoding")
        if not self._chunked:
            if len(buf) - self._head_end < self._length:
                return False
            self._body += buf[self._head_end : self._head_end + self._length]
            del buf[: self._head_end + self._length]
            return True
        while True:
            eol = buf.find(b"\r\n", self._pos)
            if eol < 0:
                return False
            size = int(bytes(buf[self._pos : eol]).split(b";", 1)[0], 16)
            if size == 0:
                if len(buf) < eol + 4:  # the empty line after the last chunk (no trailers expected)
                    return False
                del buf[: eol + 4]
                return True
            if len(buf) < eol + 2 + size + 2:
                return False
            self._body += buf[eol + 2 : eol + 2 + size]
            self._pos = eol + 2 + size + 2


C = TypeVar("C", bound=_ClientConn)


async def _connect(port: int, conn: type[C]) -> C:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(conn, "127.0.0.1", port)
    proto.port = port
    sock = proto.transport.get_extra_info("socket") if proto.transport else None
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return proto


@dataclass(slots=True)
class Sample:
    """Latencies of one (side, mode, concurrency) cell, accumulated over rounds."""

    latencies_ns: list[int]
    errors: int = 0
    events: int = 0
    first_error: str = ""


async def _reopen(conn: _ClientConn) -> None:
    """Reconnect a keep-alive connection the server closed while other sides had their turn (a busy
    machine can stretch a round past the server's keep-alive timeout)."""
    assert conn.transport is not None
    conn.transport.close()
    await asyncio.get_running_loop().create_connection(lambda: conn, "127.0.0.1", conn.port)
    sock = conn.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _worker(conn: _ClientConn, raw: bytes, n: int, stream: bool, out: Sample) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        if conn.transport is not None and conn.transport.is_closing():
            await _reopen(conn)
        t0 = clock()
        try:
            status, body = await conn.request(raw)
        except HTTPError as exc:
            out.errors += 1
            out.first_error = out.first_error or str(exc)
            return
        t1 = clock()
        if status != 200:
            out.errors += 1
            out.first_error = out.first_error or f"HTTP {status}: {body[:200]!r}"
            continue
        out.latencies_ns.append(t1 - t0)
        if stream:
            out.events += count_sse_events(body)


async def run_batch(conns: Sequence[_ClientConn], raw: bytes, total: int, stream: bool, out: Sample) -> None:
    """`total` requests spread over the connections, each connection a closed loop (send, wait, send)."""
    c = len(conns)
    per = [total // c + (1 if i < total % c else 0) for i in range(c)]
    await asyncio.gather(*(_worker(conn, raw, k, stream, out) for conn, k in zip(conns, per, strict=True)))


async def run_for(conns: Sequence[_ClientConn], raw: bytes, seconds: float, stream: bool) -> Sample:
    """Closed-loop load for a duration (the throughput fallback when wrk is missing)."""
    out = Sample([])
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        await run_batch(conns, raw, len(conns) * 20, stream, out)
    return out


async def open_conns(port: int, n: int) -> list[_ClientConn]:
    return await open_conns_as(_ClientConn, port, n)


async def open_conns_as(conn: type[C], port: int, n: int) -> list[C]:
    """`n` keep-alive connections to 127.0.0.1:`port` (TCP_NODELAY) of `conn`, a `_ClientConn` subclass."""
    return list(await asyncio.gather(*(_connect(port, conn) for _ in range(n))))


def close_all(conns: Sequence[_ClientConn]) -> None:
    for c in conns:
        if c.transport is not None:
            c.transport.close()


def run_async(coro_factory: Callable[[], Any]) -> Any:
    """Run a coroutine on uvloop when available (the gateway runs on uvloop too)."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro_factory())
