"""A pass-through HTTP proxy in front of a real simulator that records the request headers it saw
(what the simulator received), for tests of header propagation such as W3C `traceparent`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp import web

from tests.support.thread_server import serve_in_thread

_SKIP = {"host", "content-length", "transfer-encoding", "connection"}


@contextmanager
def recording_proxy(port: int, target: str) -> Iterator[list[tuple[str, dict[str, str]]]]:
    """Forward 127.0.0.1:port to `target`; yields the (path, headers) of every request forwarded."""
    seen: list[tuple[str, dict[str, str]]] = []

    def build() -> web.Application:
        session: list[aiohttp.ClientSession] = []

        async def forward(request: web.Request) -> web.StreamResponse:
            if not session:
                session.append(aiohttp.ClientSession())
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP}
            seen.append((request.path, {k.lower(): v for k, v in request.headers.items()}))
            body = await request.read()
            async with session[0].request(
                request.method, target + request.path_qs, data=body, headers=headers
            ) as up:
                resp = web.StreamResponse(status=up.status)
                for k, v in up.headers.items():
                    if k.lower() not in _SKIP:
                        resp.headers[k] = v
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp

        async def close(_: web.Application) -> None:
            for s in session:
                await s.close()

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        app.on_cleanup.append(close)
        return app

    with serve_in_thread(port, build, "recording proxy"):
        yield seen
