"""The one seam between the gateway and its pools: a `Request` value in, a `Reply` out.

Modelled on httpx's transports (`handle_async_request(Request) -> Response`): plain values, and the
clients' own exceptions mapped where they happen. A transport knows nothing of pools, replicas or
retries; the caller (gateway.upstream.calls) builds the request from the replica it leased and maps
a failure to the caller's error naming the pool (gateway.upstream.failures).

- `Request`: method, replica base URL and path, headers, body, timeouts (connect, total: the whole
  exchange, body included), and whether the body will be read as a stream.
- `Reply`: the status and headers once `handle` returns; the body by `read` (whole) or `readany`
  (the next chunk; b"" at the end). Exactly one of `release` (a finished connection may be reused)
  or `close` (drop the connection: how vLLM learns the reader left and aborts the request) ends it.
- Failures, from `handle` and from the reads, are the gateway's `TransportError`s (gateway.errors):
  `ConnectFailed`, `Disconnected`, `BadResponse`, `TransportTimeout`. Nothing else escapes but
  `ValueError` for a header value with CR or LF (refused before anything is sent) and cancellation.

Implementations: the lean HTTP/1.1 client (gateway.upstream.h1, plain-HTTP replicas: the vLLM pods),
aiohttp (gateway.upstream.aio: TLS replicas, and every replica with `LLMGW_UPSTREAM_CLIENT=aiohttp`),
LiteLLM in-process (gateway.upstream.hosted: `engine: litellm` pools) and `MockTransport` for tests
(gateway.upstream.mock). `Transports` says which one reaches a replica.

The HTTP ones ask for `accept-encoding: identity` and refuse a reply in any other content-encoding
(`BadResponse`): the relay forwards the pool's bytes and never decompresses them. Both drop idle
connections before the server's keep-alive would (4 s against uvicorn's 5 s). The behaviours they
must share are one conformance suite (tests/integration/upstream/test_transport_conformance.py).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from gateway.errors import BadResponse
from pools.replica import Replica

__all__ = ["HOSTED_SCHEME", "Reply", "Request", "Transport", "Transports", "check_encoding"]

HOSTED_SCHEME = "litellm://"  # the replica bases of `engine: litellm` pools (gateway.upstream.hosted)


class Request:
    """One request to a replica: `base` is the replica's URL (it may carry a path prefix), `path`
    the endpoint's. `headers` is the caller's dict, sent as it is (tracing adds to it per attempt)."""

    __slots__ = ("method", "base", "path", "headers", "body", "connect_s", "total_s", "stream")

    def __init__(
        self,
        method: str,
        base: str,
        path: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        connect_s: float,
        total_s: float,
        stream: bool = False,
    ) -> None:
        self.method = method
        self.base = base
        self.path = path
        self.headers = headers
        self.body = body
        self.connect_s = connect_s
        self.total_s = total_s
        self.stream = stream  # the body is read with readany as it comes (an SSE stream)

    @property
    def url(self) -> str:
        return self.base + self.path

    def __repr__(self) -> str:
        return f"Request({self.method} {self.url}, {len(self.body)} bytes, stream={self.stream})"


class Reply(Protocol):
    """An open reply: status and headers in hand, the body to read."""

    @property
    def status(self) -> int: ...

    def header(self, name: bytes) -> str | None:
        """A header's value (`name` in lower case); None when absent."""
        ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    async def readany(self) -> bytes:
        """What has arrived since the last call (waiting for something); b"" once the body is done."""
        ...

    def release(self) -> None:
        """Done with a body read to its end: the connection may serve another request."""
        ...

    def close(self) -> None:
        """Drop the connection (an unfinished body: the server sees its reader leave)."""
        ...


class Transport(Protocol):
    def handle(self, request: Request) -> Awaitable[Reply]:
        """Send `request`; done once the reply's status and headers are in. (Implementations may
        return their client's own coroutine: no extra frame per call on the hot path.)"""
        ...


class Transports:
    """Which transport reaches a replica: `plain` for http:// (the lean client, or aiohttp when it is
    off), `tls` for the rest, `hosted` for the replicas of `engine: litellm` pools. One transport for
    all (tests): `Transports(mock)`."""

    __slots__ = ("plain", "tls", "hosted")

    def __init__(
        self, plain: Transport, tls: Transport | None = None, hosted: Transport | None = None
    ) -> None:
        self.plain = plain
        self.tls = tls or plain
        self.hosted = hosted or self.tls

    def of(self, replica: Replica) -> Transport:
        if replica.plain_http:
            return self.plain
        if replica.base.startswith(HOSTED_SCHEME):
            return self.hosted
        return self.tls


def check_encoding(value: str | None) -> None:
    """Refuse a compressed body: the gateway asks for `accept-encoding: identity` and relays bytes
    as they are, so a body in any other coding would reach the client undecodable."""
    if value is not None and value.strip().lower() not in ("", "identity"):
        raise BadResponse(f"content-encoding {value!r} was not asked for", "a compressed response")
