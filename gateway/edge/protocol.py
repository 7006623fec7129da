"""The HTTP/1.1 server protocol with the edge's limits: uvicorn's httptools protocol, bounded.

uvicorn bounds none of what a hostile client controls before the app runs: httptools buffers a header
of any size, any number of headers, and a connection that sends its request (or nothing) one byte at
a time is held for good. A slow-reading client parks the response in the transport's buffer, and the
relay's `send` waits for it with no end. This subclass adds, per connection and with no work on a
request that arrives whole (the common case, one `data_received`):

- header block: at most `max_header_bytes` (URL included) and `max_headers` lines -> 431;
- the request line and headers must arrive within `header_timeout_s` of the connection or of the
  request's first byte; a body within `body_timeout_s` and at `body_min_rate` bytes/s on average
  after `body_grace_s` -> 408 (the relay sees a client that left: nothing reserved is lost). Time
  during which the server itself stopped reading (uvicorn pauses a body the app has not consumed)
  does not count against the client;
- a response the client stops reading for `write_stall_s` -> the connection is aborted, which the
  relay sees as a client that left (the pool call is cancelled, the reservation settled). The
  socket's send buffer is capped at `send_buffer_bytes`: left to autotuning it grows to megabytes
  on a fast link, which at 50 tokens/s is minutes of a stream before a stalled reader shows;
- at most `max_connections` open connections per process -> 503 at once, before any parsing;
- every error the server itself answers (these and httptools' parse errors) is OpenAI-shaped JSON.

Checks run on one timer per slow connection (`tick_s`), armed only while a request is incomplete.

`HttpToolsProtocol` is uvicorn's private class: this subclass relies on its parser callbacks and
attributes (`parser`, `headers`, `url`, `cycle`, `flow`, `connections`, `_unset_keepalive_if_required`,
`send_400_response`). It is tested with the uvicorn minor of `SUPPORTED_UVICORN` (pyproject pins the
same range); `guarded_protocol` refuses any other uvicorn with `UnsupportedUvicorn`, so that a drifted
install fails at start-up rather than on a hostile client's request.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import (
    GatewayError,
    HeadersTooLargeError,
    InvalidRequestError,
    RequestTimeoutError,
    UpstreamUnavailableError,
)

__all__ = ["SUPPORTED_UVICORN", "EdgeLimits", "UnsupportedUvicorn", "check_uvicorn", "guarded_protocol"]

# The uvicorn versions `_Guarded` is tested with: at least the first (major, minor), below the second.
SUPPORTED_UVICORN = ((0, 55), (0, 56))

_IDLE, _HEAD, _BODY = 0, 1, 2  # where the connection is in reading its current request


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    body_min_rate: int = 1024  # bytes/s, averaged over the body so far, once `body_grace_s` passed
    body_grace_s: float = 5.0
    write_stall_s: float = 30.0
    max_connections: int = 4096
    send_buffer_bytes: int = 128 * 1024
    tick_s: float = 1.0


class _Refuse(Exception):
    """Raised inside a parser callback to stop parsing; `data_received` answers `error`."""

    def __init__(self, error: GatewayError) -> None:
        super().__init__(error.message)
        self.error = error


def _response(err: GatewayError) -> bytes:
    body = err.body()
    head = [f"HTTP/1.1 {err.status} {_REASONS.get(err.status, 'Error')}"]
    head += ["content-type: application/json", f"content-length: {len(body)}", "connection: close"]
    head += [f"{k}: {v}" for k, v in err.response_headers().items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class _HeadHold:
    """The transport a request's response cycle writes through. uvicorn writes a response's head and
    its first body part as two `send()` system calls (and two packets); the head is held here and goes
    out with the body part in one. Measured: one of the three writes of a relayed unary request, and
    of the four of a short stream. Everything else passes through; a head with no body write after it
    (HEAD, an empty body) goes out when the response completes (`_Guarded.on_response_complete`).
    One per request: a pipelined request's cycle has its own, and uvicorn starts it only once the
    previous response completed, so at most one holds at a time."""

    __slots__ = ("transport", "armed", "held", "owner")

    def __init__(self, transport: asyncio.Transport, owner: _Guarded) -> None:
        self.transport = transport
        self.owner = owner
        self.armed = True  # the next write is the response head
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self.held
        if held is not None:
            self.held = None
            self.owner._holding = None
            self.transport.write(held + data)
        elif self.armed and not data.startswith(b"HTTP/1.1 100 "):  # `100 Continue`: at once
            self.armed = False
            self.held = data
            self.owner._holding = self
        else:
            self.transport.write(data)

    def flush(self) -> None:
        held = self.held
        if held is not None:
            self.held = None
            self.owner._holding = None
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class _Guarded(HttpToolsProtocol):
    limits: EdgeLimits = EdgeLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _HEAD
        self._began = 0.0  # when the current phase began (loop time)
        self._pending = 0  # bytes received while the headers are incomplete
        # The phase changed since `_began` was stamped. Stamped lazily, at the next tick: a clock read
        # per request and phase would cost every request, and only an incomplete one needs it.
        self._stale = False
        self._body_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._holding: _HeadHold | None = None  # the cycle's transport holding a response head

    # -- connection -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._answer(UpstreamUnavailableError("the gateway has too many open connections"))
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.send_buffer_bytes)
        self._began = self.loop.time()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._timer, self._stall):
            if timer is not None:
                timer.cancel()
        self._timer = self._stall = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._phase != _BODY:
            self._pending += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            cause = e.__context__
            self._answer(cause.error if isinstance(cause, _Refuse) else InvalidRequestError(str(cause)))
            return
        except httptools.HttpParserError as e:
            self._answer(InvalidRequestError(f"invalid HTTP request: {e}", code="invalid_http"))
            return
        except httptools.HttpParserUpgrade:
            self._answer(InvalidRequestError("protocol upgrades are not supported", code="invalid_http"))
            return
        if self._phase == _HEAD and (
            self._pending > self.limits.max_header_bytes
            or (self.headers is not None and len(self.headers) > self.limits.max_headers)
        ):
            self._answer(_too_large(self.limits))
        elif self._phase != _IDLE and self._timer is None:
            self._arm()

    def send_400_response(self, msg: str) -> None:
        self._answer(InvalidRequestError(msg, code="invalid_http"))

    # -- parser callbacks -----------------------------------------------------------------------
    # Per request, the base class is named, not `super()`: a super object per call otherwise.

    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        self._phase, self._stale, self._body_bytes = _HEAD, True, 0

    def on_headers_complete(self) -> None:
        # Counted here, once, not per header line: a callback per header costs every request.
        lim = self.limits
        if len(self.headers) > lim.max_headers or (
            # What arrived so far may hold body bytes too: only then is the header block measured.
            self._pending > lim.max_header_bytes
            and len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers) > lim.max_header_bytes
        ):
            raise _Refuse(_too_large(lim))
        self._phase, self._pending, self._stale = _BODY, 0, True
        HttpToolsProtocol.on_headers_complete(self)
        cycle = self.cycle
        if cycle is not None:  # uvicorn made it above; its task has not run yet
            cycle.transport = _HeadHold(self.transport, self)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        HttpToolsProtocol.on_body(self, body)

    def on_response_complete(self) -> None:
        if self._holding is not None:  # a head no body write followed (HEAD, an empty body)
            self._holding.flush()
        HttpToolsProtocol.on_response_complete(self)

    def on_message_complete(self) -> None:
        self._phase = _IDLE
        HttpToolsProtocol.on_message_complete(self)

    # -- slow readers ---------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.limits.write_stall_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        """The client stopped reading: drop it; the relay sees a client that left."""
        self._stall = None
        self.logger.info("client stopped reading for %.0fs: connection aborted", self.limits.write_stall_s)
        self.transport.abort()

    # -- deadlines ------------------------------------------------------------------------------

    def _arm(self) -> None:
        self._timer = self.loop.call_later(self.limits.tick_s, self._check)

    def _check(self) -> None:
        self._timer = None
        if self.transport.is_closing() or self._phase == _IDLE:
            return
        lim = self.limits
        if self._stale:
            # The phase began since the last tick (within one tick): its deadline counts from now.
            self._stale, self._began = False, self.loop.time()
            self._arm()
            return
        if self._phase == _BODY and self.flow.read_paused:
            # The app has not taken what arrived (uvicorn stopped reading): not the client's delay.
            self._began += lim.tick_s
            self._arm()
            return
        elapsed = self.loop.time() - self._began
        if self._phase == _HEAD and elapsed > lim.header_timeout_s:
            self._answer(
                RequestTimeoutError(f"request headers not received within {lim.header_timeout_s:g}s")
            )
        elif self._phase == _BODY and (
            elapsed > lim.body_timeout_s
            or (elapsed >= lim.body_grace_s and self._body_bytes < lim.body_min_rate * elapsed)
        ):
            self._answer(
                RequestTimeoutError(
                    f"request body not received in time (within {lim.body_timeout_s:g}s, "
                    f"at {lim.body_min_rate} bytes/s or faster after {lim.body_grace_s:g}s)"
                )
            )
        else:
            self._arm()

    def _answer(self, err: GatewayError) -> None:
        """Answer `err` (unless a response is under way) and close: the connection's state is unknown."""
        cycle = self.cycle
        if self._holding is not None:
            self._holding.flush()
        if cycle is None or not cycle.response_started:
            self.transport.write(_response(err))
        if cycle is not None:
            cycle.keep_alive = False
        self._phase = _IDLE
        self.transport.close()


def _too_large(limits: EdgeLimits) -> HeadersTooLargeError:
    return HeadersTooLargeError(
        f"request headers exceed {limits.max_header_bytes} bytes or {limits.max_headers} lines"
    )


class UnsupportedUvicorn(RuntimeError):
    """The installed uvicorn is outside `SUPPORTED_UVICORN`: the private class `_Guarded` extends may
    have changed under it."""


def check_uvicorn(version: str | None = None) -> None:
    """Raise `UnsupportedUvicorn` unless `version` (default: the installed uvicorn's) is supported."""
    version = uvicorn.__version__ if version is None else version
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_UVICORN
    supported = f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None or not SUPPORTED_UVICORN[0] <= (int(m[1]), int(m[2])) < SUPPORTED_UVICORN[1]:
        raise UnsupportedUvicorn(
            f"uvicorn {version} is installed; the gateway's HTTP protocol (gateway/edge/protocol.py) "
            f"subclasses uvicorn's private HttpToolsProtocol and supports uvicorn {supported} only: "
            f"install it with pip install 'uvicorn[standard]{supported}' (constraints/gateway.txt pins "
            "the version the tests passed with)"
        )


def guarded_protocol(limits: EdgeLimits) -> type[HttpToolsProtocol]:
    """uvicorn's `http=` class with these limits (`UnsupportedUvicorn` outside `SUPPORTED_UVICORN`)."""
    check_uvicorn()
    return type("GuardedHttpToolsProtocol", (_Guarded,), {"limits": limits})
