"""One transport interface for the relay's calls to replicas, with two implementations.

`H1Transport` (the lean HTTP/1.1 client, gateway.upstream.h1) serves plain-HTTP replicas, the vLLM
pods in the cluster; `AiohttpTransport` serves TLS ones (hosted APIs) and every replica when
`LLMGW_UPSTREAM_CLIENT=aiohttp`. Both hand back a `Reply`: the status and headers in hand, the body
by `read` (whole) or `readany` (the next chunk, b"" at the end); `release` reuses a finished
connection, `close` drops it (how vLLM learns the reader left and aborts the request). Failures are
the clients' own (`UPSTREAM_FAILURES`), mapped to the caller's errors by gateway.upstream.failures.

Both ask for `accept-encoding: identity` and refuse a reply in any other content-encoding
(`BadResponse`): the relay forwards the pool's bytes and never decompresses them. Both drop idle
connections before the server's keep-alive would (4 s against uvicorn's 5 s). The behaviours both
must share are one conformance suite (tests/integration/upstream/test_transport_conformance.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

import aiohttp

from gateway.upstream._h1_response import H1Error, check_encoding
from gateway.upstream.h1 import H1Client
from gateway.upstream.pool_client import PoolClient
from pools.replica import Replica

UPSTREAM_FAILURES = (aiohttp.ClientError, H1Error, asyncio.TimeoutError, OSError)


class Reply(Protocol):
    """An open upstream response."""

    @property
    def status(self) -> int: ...

    def header(self, name: bytes) -> str | None: ...

    async def read(self) -> bytes: ...

    async def readany(self) -> bytes: ...

    def release(self) -> object: ...

    def close(self) -> object: ...


class Transport(Protocol):
    def post(
        self, pool: PoolClient, replica: Replica, path: str, payload: bytes, headers: dict[str, str]
    ) -> Coroutine[Any, Any, Reply]:
        """Send the request; done once the response's status and headers are in. (Implementations
        return the client's own coroutine: no extra frame per call on the hot path.)"""
        ...


class H1Transport:
    __slots__ = ("_client",)

    def __init__(self, client: H1Client) -> None:
        self._client = client

    def post(
        self, pool: PoolClient, replica: Replica, path: str, payload: bytes, headers: dict[str, str]
    ) -> Coroutine[Any, Any, Reply]:
        t = pool.config.timeouts
        return self._client.post(
            replica.base, path, payload, headers, connect_s=t.connect_s, total_s=t.total_s
        )


class _AiohttpReply:
    __slots__ = ("_resp", "readany")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.readany = resp.content.readany

    @property
    def status(self) -> int:
        return self._resp.status

    def header(self, name: bytes) -> str | None:
        return self._resp.headers.get(name.decode("latin-1"))

    async def read(self) -> bytes:
        return await self._resp.read()

    def release(self) -> object:
        self._resp.release()
        return None

    def close(self) -> object:
        self._resp.close()
        return None


class AiohttpTransport:
    __slots__ = ("_session",)

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def post(
        self, pool: PoolClient, replica: Replica, path: str, payload: bytes, headers: dict[str, str]
    ) -> Reply:
        resp = await self._session.post(
            replica.url(path), data=payload, headers=headers, timeout=pool.timeout
        )
        try:
            check_encoding(resp.headers.get("content-encoding"))
        except BaseException:
            resp.close()
            raise
        return _AiohttpReply(resp)


class Transports:
    """Which transport reaches a replica: the lean client for plain HTTP when it is on, else aiohttp."""

    __slots__ = ("_h1", "_aiohttp")

    def __init__(self, session: aiohttp.ClientSession, h1: H1Client | None = None) -> None:
        self._h1 = H1Transport(h1) if h1 is not None else None
        self._aiohttp = AiohttpTransport(session)

    def of(self, replica: Replica) -> Transport:
        if self._h1 is not None and replica.plain_http:
            return self._h1
        return self._aiohttp
