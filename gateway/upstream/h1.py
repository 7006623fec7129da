"""A lean HTTP/1.1 client for the relay's calls to plain-HTTP replicas (vLLM pods in the cluster).

Why not aiohttp for these: profiled at concurrency 32 on one core (docs/performance.md), aiohttp's
client was 30 % of the gateway's CPU per request: request and response objects, header multidicts,
timer contexts, its stream reader. A relay needs none of it: it POSTs bytes it already has, reads a
status, a few headers and the body (whole, or chunk by chunk for SSE). This client is one asyncio
Protocol per connection with httptools (the C parser uvicorn already uses) decoding the response,
chunked transfer encoding included, and a keep-alive pool per replica. It is used for `http://`
replicas only; TLS upstreams (hosted APIs) keep aiohttp.

Behaviour the relay relies on:
- `close()` on a response drops the connection: that is how vLLM learns the client left and aborts the
  request (frees its KV cache). `release()` returns a fully read connection to the pool.
- A connection reused from the pool that the server had closed while idle fails before any byte of
  the response: the request is sent again once on a new connection (nothing was processed).
- Failures are the gateway's own transport errors (gateway.errors), raised here, where they happen:
  `ConnectFailed` (could not connect), `Disconnected` (the connection ended before the response was
  complete), `BadResponse` (unparseable), `TransportTimeout` (the total timeout).
- `total_s` bounds the whole exchange: when it expires the connection is closed and any read raises
  `TransportTimeout`.
- The request says `accept-encoding: identity`; a reply in any other content-encoding is a
  `BadResponse` (the relay forwards bytes, it never decompresses). `host` carries the port when it
  is not 80 and brackets an IPv6 literal. A header value holding CR or LF is refused (`ValueError`)
  before anything is written.
- 1xx interim responses are skipped; a body with neither content-length nor chunked framing ends
  at EOF (complete, not `Disconnected`); a response header block over `MAX_HEAD_BYTES` is a
  `BadResponse`.
- An idle pooled connection is dropped after `idle_s` (4 s: below the 5 s keep-alive of uvicorn,
  which vLLM runs), so it is not reused just as the server closes it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from time import monotonic
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from gateway.errors import BadResponse, ConnectFailed, Disconnected, TransportTimeout
from gateway.upstream.transport import Request, check_encoding

__all__ = ["H1Client", "Response"]

MAX_HEAD_BYTES = 64 << 10  # a response's status line and headers (vLLM's are a few hundred bytes)
IDLE_S = 4.0  # an idle keep-alive connection older than this is closed instead of reused
_HIGH_WATER = 1 << 20  # response bytes buffered unread before reading from the socket pauses
_METHODS = {"POST": b"POST ", "GET": b"GET "}


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    def __init__(self, pool: _HostPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.resp: Response | None = None
        self.closed = False
        self.received = False  # any byte of the current exchange arrived
        self.keep_alive = True
        self.paused = False
        self.headers_done: asyncio.Future[None] | None = None
        self.head_bytes = 0  # bytes received while the response's header block was incomplete
        self.until_eof = False  # the body has no length: it ends when the server closes
        self.idle_since = 0.0

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass; it has the same methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        resp = self.resp
        if resp is not None and not resp.status:  # the header block is still coming
            if self.head_bytes > MAX_HEAD_BYTES:
                why = f"response header block over {MAX_HEAD_BYTES} bytes"
                self._abort(BadResponse(why, f"a response header block over {MAX_HEAD_BYTES >> 10} KiB"))
                return
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._abort(BadResponse(f"malformed response: {exc}"))

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        resp = self.resp
        if self.until_eof and exc is None and resp is not None and resp.status:
            resp._finish()  # a close-delimited body: the close is its end
        self._abort(Disconnected("the upstream closed the connection before the response was complete"))

    # -- httptools callbacks -----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.resp is not None:
            self.resp.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        resp = self.resp
        if resp is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # interim (100 Continue, 103 Early Hints): the answer follows
            resp.headers.clear()
            return
        resp.status = status
        self.keep_alive = self.parser.should_keep_alive()
        headers = resp.headers
        self.until_eof = (
            b"content-length" not in headers
            and headers.get(b"transfer-encoding", b"").lower().find(b"chunked") == -1  # not `in`: sse.py
            and status not in (204, 304)
        )
        encoding = headers.get(b"content-encoding")
        if encoding is not None:
            try:
                check_encoding(encoding.decode("latin-1"))
            except BadResponse as exc:
                self._abort(exc)
                return
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.resp is not None:
            self.resp._feed(body)

    def on_message_complete(self) -> None:
        if self.resp is not None and self.resp.status:  # not an interim 1xx
            self.resp._finish()

    # -- used by the client and the response --------------------------------------------------
    def _abort(self, error: BaseException) -> None:
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_exception(error)
            self.headers_done.exception()  # retrieved: no "never retrieved" warning if nobody waits
        if self.resp is not None:
            self.resp._fail(error)
        self.close()

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def reusable(self) -> None:
        self.resp = None
        self.headers_done = None
        if self.keep_alive and not self.closed:
            self.resume()
            self.parser = httptools.HttpResponseParser(self)
            self.head_bytes = 0
            self._pool.put(self)
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()
            self._pool.forget(self)


class Response:
    """One response: `status` and `headers` once `H1Client.post` returns; the body by `read` or
    `readany`. Exactly one of `release` / `close` ends it."""

    __slots__ = (
        "status", "headers", "_conn", "_chunks", "_size", "_complete", "_error", "_waiter", "_timer",
        "_whole", "_loop",
    )  # fmt: skip

    def __init__(self, conn: _Conn, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # the client's: asyncio.get_running_loop costs a getpid() call on 3.11
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
        self._waiter = self._loop.create_future()
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
        error = TransportTimeout("the upstream exchange exceeded its total timeout")
        if conn is not None:
            conn._abort(error)  # wakes a caller waiting for headers or body with the timeout
        else:
            self._fail(error)


class _HostPool:
    """Idle keep-alive connections to one host:port (most recently used last: warm sockets first)."""

    def __init__(self, host: str, port: int, max_idle: int, idle_s: float) -> None:
        self.host = host
        self.port = port
        self.idle: deque[_Conn] = deque()
        self.max_idle = max_idle
        self.idle_s = idle_s

    def get(self) -> _Conn | None:
        # time.monotonic, not the loop's clock: asyncio.get_running_loop costs a getpid() system call
        # on Python 3.11, and this runs twice per request.
        now = monotonic()
        while self.idle:
            conn = self.idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > self.idle_s:
                # The server may be closing it right now; the ones behind it are older still.
                conn.close()
                self.close()
                return None
            return conn
        return None

    def put(self, conn: _Conn) -> None:
        if len(self.idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = monotonic()
        self.idle.append(conn)

    def forget(self, conn: _Conn) -> None:
        try:
            self.idle.remove(conn)
        except ValueError:
            pass

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class H1Client:
    """Requests over pooled keep-alive connections, one pool per replica base URL."""

    def __init__(self, max_idle_per_host: int = 256, idle_s: float = IDLE_S) -> None:
        self._pools: dict[str, tuple[_HostPool, tuple[bytes, bytes]]] = {}
        self._max_idle = max_idle_per_host
        self._idle_s = idle_s
        # The loop it runs on, found once: asyncio.get_running_loop makes a getpid() system call on
        # Python 3.11, per request. Found again if that loop was closed (tests run several loops).
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def supports(base: str) -> bool:
        return base.startswith("http://")

    def _pool(self, base: str) -> tuple[_HostPool, tuple[bytes, bytes]]:
        """The replica's connection pool, and its path prefix and `host` header value."""
        entry = self._pools.get(base)
        if entry is None:
            u = urlsplit(base)
            host, port = u.hostname or "127.0.0.1", u.port or 80
            name = f"[{host}]" if ":" in host else host  # an IPv6 literal
            authority = name if port == 80 else f"{name}:{port}"
            head = u.path.rstrip("/").encode(), authority.encode("ascii")
            entry = self._pools[base] = (_HostPool(host, port, self._max_idle, self._idle_s), head)
        return entry

    async def _connect(self, pool: _HostPool, connect_s: float) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_s):
                transport, conn = await loop.create_connection(lambda: _Conn(pool), pool.host, pool.port)
        except (OSError, TimeoutError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or "timeout"
            raise ConnectFailed(f"cannot connect to {pool.host}:{pool.port}: {reason}") from None
        if conn.transport is None:
            conn.connection_made(transport)  # uvloop may call it only after create_connection returns
        return conn

    def handle(self, request: Request) -> Coroutine[Any, Any, Response]:
        """The transport seam (gateway.upstream.transport): the request sent, done once the status and
        headers are in. (The client's own coroutine: no extra frame per call.)"""
        return self._request(
            _METHODS[request.method],
            (request.base, request.path),
            request.headers,
            request.body,
            (request.connect_s, request.total_s),
        )

    async def post(
        self,
        base: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        connect_s: float,
        total_s: float,
    ) -> Response:
        """Send the request and wait for the response's status and headers (not its body)."""
        return await self._request(b"POST ", (base, path), headers, body, (connect_s, total_s))

    async def get(self, base: str, path: str, *, connect_s: float, total_s: float) -> Response:
        """A GET (the replicas' /metrics scrape), like `post`."""
        return await self._request(b"GET ", (base, path), {}, b"", (connect_s, total_s))

    async def _request(
        self,
        method: bytes,
        target: tuple[str, str],
        headers: dict[str, str],
        body: bytes,
        limits: tuple[float, float],
    ) -> Response:
        (base, path), (connect_s, total_s) = target, limits
        pool, (prefix, authority) = self._pool(base)
        request = _head(method, prefix + path.encode(), authority, headers, len(body)) + body
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + total_s
        for attempt in range(2):
            # A retry never takes another pooled connection: it may be as stale as the first.
            conn = pool.get() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = await self._connect(pool, min(connect_s, max(0.001, deadline - loop.time())))
            resp = Response(conn, loop)
            conn.resp = resp
            conn.received = False
            conn.head_bytes = 0
            conn.headers_done = loop.create_future()
            assert conn.transport is not None
            conn.transport.write(request)
            resp._timer = loop.call_at(deadline, resp._expire)
            try:
                await conn.headers_done
            except Disconnected:
                resp.close()
                if reused and not conn.received:
                    continue  # the server had closed this idle connection: send again, on a new one
                raise
            except BaseException:
                resp.close()
                raise
            if resp._error is not None:  # e.g. the total timeout fired
                resp.close()
                raise resp._error
            return resp
        raise Disconnected("the upstream closed the connection before answering")  # pragma: no cover

    def close(self) -> None:
        for pool, _ in self._pools.values():
            pool.close()
        self._pools.clear()


def _head(method: bytes, target: bytes, authority: bytes, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers. A value with CR or LF would end the header early and let the
    rest pass as headers of its own (a pool key read with a trailing newline): refused."""
    head = [
        method,
        target,
        b" HTTP/1.1\r\nhost: ",
        authority,
        b"\r\naccept-encoding: identity\r\ncontent-length: ",
        str(length).encode(),
        b"\r\n",
    ]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"the upstream request header {name!r} holds a CR or LF")
        head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
    head.append(b"\r\n")
    return b"".join(head)
