"""The lean HTTP/1.1 client against small in-process servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from gateway.errors import BadResponse, ConnectFailed, Disconnected, TransportTimeout
from gateway.upstream.h1 import H1Client
from gateway.upstream.pool_client import metrics_fetch
from tests.support.raw_http import ok, read_request

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_keep_alive_reuses_one_connection_and_sends_what_it_is_given() -> None:
    connections = 0
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                seen.append(await read_request(r))
            except asyncio.IncompleteReadError:
                break
            w.write(ok(b'{"ok":true}', b"retry-after: 3\r\n"))
            await w.drain()
        w.close()

    server, base = await _serve(handler)
    client = H1Client()
    for _ in range(3):
        resp = await client.post(
            base + "/prefix", "/v1/chat/completions", b"{}", {"x-request-id": "r1"}, connect_s=1, total_s=5
        )
        assert resp.status == 200 and resp.header(b"retry-after") == "3"
        assert await resp.read() == b'{"ok":true}'
        resp.release()
    assert connections == 1
    assert seen[0].startswith(b"POST /prefix/v1/chat/completions HTTP/1.1\r\n")
    assert b"x-request-id: r1\r\n" in seen[0] and seen[0].endswith(b"\r\n\r\n{}")
    client.close()
    server.close()


async def test_chunked_stream_is_read_piece_by_piece() -> None:
    release = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n")
        w.write(b"6\r\ndata: \r\n")
        await w.drain()
        await release.wait()
        w.write(b"4\r\nabc\n\r\n0\r\n\r\n")
        await w.drain()

    server, base = await _serve(handler)
    client = H1Client()
    resp = await client.post(base, "/s", b"", {}, connect_s=1, total_s=5)
    assert resp.header(b"content-type") == "text/event-stream"
    assert await resp.readany() == b"data: "
    release.set()
    rest = b""
    while chunk := await resp.readany():
        rest += chunk
    assert rest == b"abc\n" and resp.complete
    resp.release()
    client.close()
    server.close()


async def test_a_stale_idle_connection_is_replaced_transparently() -> None:
    calls = 0

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal calls
        await read_request(r)
        calls += 1
        w.write(ok(b"x"))
        await w.drain()
        w.close()  # keep-alive promised (HTTP/1.1 default), then closed while idle

    server, base = await _serve(handler)
    client = H1Client()
    for _ in range(2):
        resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
        assert await resp.read() == b"x"
        resp.release()
        await asyncio.sleep(0.05)  # let the close arrive
    assert calls == 2
    client.close()
    server.close()


async def test_failures_are_typed() -> None:
    async def early_close(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await w.drain()
        w.close()

    async def garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"this is not http\r\n\r\n")
        await w.drain()

    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        await asyncio.sleep(5)

    client = H1Client()
    server, base = await _serve(early_close)
    resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
    with pytest.raises(Disconnected):
        await resp.read()
    resp.close()
    server.close()

    server, base = await _serve(garbage)
    with pytest.raises(BadResponse):
        await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
    server.close()

    server, base = await _serve(silent)
    with pytest.raises(TransportTimeout):
        await client.post(base, "/p", b"", {}, connect_s=1, total_s=0.2)
    server.close()

    server, base = await _serve(silent)
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectFailed):
        await client.post(base, "/p", b"", {}, connect_s=1, total_s=1)
    client.close()


async def test_close_drops_the_connection_so_the_server_sees_the_reader_leave() -> None:
    gone = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await w.drain()
        await r.read()  # returns b"" when the client closes
        gone.set()

    server, base = await _serve(handler)
    client = H1Client()
    resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
    assert await resp.readany() == b"first"
    resp.close()
    await asyncio.wait_for(gone.wait(), 2)
    client.close()
    server.close()


async def test_a_body_larger_than_the_read_buffer_is_read_whole_or_in_pieces() -> None:
    big = b"x" * (3 << 20)

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(r)
            except asyncio.IncompleteReadError:
                break
            w.write(ok(big))
            await w.drain()

    server, base = await _serve(handler)
    client = H1Client()
    resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=10)
    assert await resp.read() == big
    resp.release()
    resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=10)
    got = b""
    while chunk := await resp.readany():
        got += chunk
        await asyncio.sleep(0)  # a slow reader: the client pauses the socket past its high-water mark
    assert got == big
    resp.release()
    client.close()
    server.close()


async def test_metrics_fetch_gets_over_the_lean_client_and_maps_failures_to_none() -> None:
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            try:
                req = await read_request(r)
            except asyncio.IncompleteReadError:
                break
            seen.append(req)
            if b"/missing" in req:
                w.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            else:
                w.write(ok(b"vllm:num_requests_waiting 2\n"))
            await w.drain()
        w.close()

    server, base = await _serve(handler)
    h1 = H1Client()
    async with httpx.AsyncClient() as control:
        fetch = metrics_fetch(h1, control)
        assert await fetch(base, "/metrics", 1.0) == "vllm:num_requests_waiting 2\n"
        assert await fetch(base, "/metrics", 1.0) is not None  # same keep-alive connection
        assert await fetch(base, "/missing", 1.0) is None
        server.close()
        await server.wait_closed()
        assert await fetch("http://127.0.0.1:9", "/metrics", 0.5) is None  # refused
    assert seen[0].startswith(b"GET /metrics HTTP/1.1\r\n")
    assert len(seen) == 3
    h1.close()


async def test_a_request_lost_on_a_stale_pooled_connection_is_sent_again_on_a_new_one() -> None:
    # Two pooled connections, both of which the server drops on their next request without an answer
    # (its keep-alive ran out just as the request arrived). The retry must use a new connection: a
    # second pooled one would be just as stale.
    connections = 0

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(r)
        w.write(ok(b"x"))
        await w.drain()
        try:
            await read_request(r)  # the next request on this connection...
        except asyncio.IncompleteReadError:
            return
        w.close()  # ...is dropped unanswered, nothing of a response written

    server, base = await _serve(handler)
    client = H1Client()
    first = await asyncio.gather(
        *(client.post(base, "/p", b"", {}, connect_s=1, total_s=5) for _ in range(2))
    )
    for resp in first:
        assert await resp.read() == b"x"
        resp.release()
    assert connections == 2
    resp = await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
    assert await resp.read() == b"x"
    resp.release()
    assert connections == 3  # the retry opened a connection of its own
    client.close()
    server.close()


async def test_a_fresh_connection_that_drops_the_request_is_not_retried() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.close()

    server, base = await _serve(handler)
    client = H1Client()
    with pytest.raises(Disconnected):
        await client.post(base, "/p", b"", {}, connect_s=1, total_s=5)
    client.close()
    server.close()
