"""The floor: the least a Python relay can do, as a bare ASGI app (no framework, no parsing, no auth).

`uvicorn --factory eval.bench.peers.floor:create_app` with `FLOOR_UPSTREAM=http://127.0.0.1:PORT`: every POST
is forwarded to the same path upstream through one pooled aiohttp session; a unary answer is read whole
and sent with its length, an SSE answer is relayed chunk by chunk as the bytes arrive. Whatever our
gateway adds over this figure is the cost of its features, not of Python, uvicorn or aiohttp.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def create_app(upstream: str | None = None) -> ASGIApp:
    base = (upstream or os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8001")).rstrip("/")
    # Built in the lifespan: a ClientSession must be created inside the running loop.
    state: dict[str, aiohttp.ClientSession] = {}

    async def lifespan(receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                conn = aiohttp.TCPConnector(limit=1024, ttl_dns_cache=None)
                state["session"] = aiohttp.ClientSession(connector=conn, auto_decompress=False)
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                if "session" in state:
                    await state["session"].close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":  # readiness probe
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        chunks = []
        more = True
        while more:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        headers = {"content-type": "application/json"}
        async with state["session"].post(base + scope["path"], data=b"".join(chunks), headers=headers) as up:
            ctype = up.headers.get("content-type", "application/json").encode()
            if ctype.startswith(b"text/event-stream"):
                await send(
                    {
                        "type": "http.response.start",
                        "status": up.status,
                        "headers": [(b"content-type", ctype)],
                    }
                )
                async for data in up.content.iter_any():
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                body = await up.read()
                head = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": up.status, "headers": head})
                await send({"type": "http.response.body", "body": body})

    return app
