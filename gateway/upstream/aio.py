"""The aiohttp transport: TLS replicas (hosted OpenAI-compatible APIs, `engine: openai` over https),
and every replica when `LLMGW_UPSTREAM_CLIENT=aiohttp` (the escape hatch and A/B switch of
docs/design/016).

aiohttp's exceptions (`ClientError` and its kinds, `OSError`, `asyncio.TimeoutError`) are mapped to
the gateway's transport errors here, for the request and for every read of the body, so nothing
above the transport catches an aiohttp type. The session asks for identity encoding and never
decompresses: the relay forwards the pool's bytes.
"""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.errors import ConnectFailed, Disconnected, TransportError, TransportTimeout
from gateway.upstream.h1 import IDLE_S
from gateway.upstream.transport import Request, check_encoding

__all__ = ["AiohttpTransport", "new_session"]

# What aiohttp raises for a failed exchange (anything else is a bug, and propagates as one).
_FAILURES = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


def new_session(pool_size: int, keepalive_s: float = IDLE_S) -> aiohttp.ClientSession:
    """One session per process, built in the app lifespan. It asks for identity: an absent
    accept-encoding would allow any coding (RFC 9110 §12.5.3). Idle connections go after
    `keepalive_s`, before uvicorn's 5 s keep-alive closes them under a request."""
    connector = aiohttp.TCPConnector(
        limit=pool_size,
        limit_per_host=0,
        ttl_dns_cache=30,
        enable_cleanup_closed=True,
        keepalive_timeout=keepalive_s,
    )
    return aiohttp.ClientSession(
        connector=connector,
        # Per-request timeouts come from the request; the session default only guards stray calls.
        timeout=aiohttp.ClientTimeout(total=600),
        headers={"accept-encoding": "identity"},
        skip_auto_headers=("User-Agent",),
        auto_decompress=False,
        raise_for_status=False,
    )


def mapped(exc: BaseException) -> TransportError:
    """aiohttp's failure as the gateway's (its text, which may name hosts, kept as the detail)."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectFailed(detail)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return Disconnected(detail)
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return TransportTimeout(detail)
    return TransportError(detail, f"no usable answer ({type(exc).__name__})")


class _Reply:
    __slots__ = ("_resp", "_content")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self._content = resp.content

    @property
    def status(self) -> int:
        return self._resp.status

    def header(self, name: bytes) -> str | None:
        return self._resp.headers.get(name.decode("latin-1"))

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except _FAILURES as exc:
            raise mapped(exc) from exc

    async def readany(self) -> bytes:
        try:
            return await self._content.readany()
        except _FAILURES as exc:
            raise mapped(exc) from exc

    def release(self) -> None:
        self._resp.release()

    def close(self) -> None:
        self._resp.close()


class AiohttpTransport:
    __slots__ = ("_session", "_timeouts")

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self._timeouts: dict[tuple[float, float], aiohttp.ClientTimeout] = {}  # one per pool's pair

    async def handle(self, request: Request) -> _Reply:
        limits = (request.connect_s, request.total_s)
        timeout = self._timeouts.get(limits)
        if timeout is None:
            connect, total = limits
            timeout = self._timeouts[limits] = aiohttp.ClientTimeout(
                total=total, connect=connect, sock_connect=connect
            )
        try:
            resp = await self._session.request(
                request.method, request.url, data=request.body, headers=request.headers, timeout=timeout
            )
        except _FAILURES as exc:
            raise mapped(exc) from exc
        try:
            check_encoding(resp.headers.get("content-encoding"))
        except BaseException:
            resp.close()
            raise
        return _Reply(resp)
