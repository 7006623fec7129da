"""One conformance suite for the relay's two HTTP transports (gateway.upstream.transport): the lean
HTTP/1.1 client and aiohttp must behave the same against servers that do what HTTP/1.1 allows and
what it does not, behind the same seam (a `Request` in, a `Reply` out, failures as the gateway's
`TransportError`s). Each behaviour is one test, run against both; the servers are asyncio servers on
real local ports, written here byte for byte. Waits poll with generous deadlines; nothing asserts
on how long something took."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gateway.errors import BadResponse, TransportError, TransportTimeout
from gateway.sse import SSESplitter
from gateway.upstream.aio import AiohttpTransport, new_session
from gateway.upstream.failures import classify
from gateway.upstream.h1 import H1Client
from gateway.upstream.transport import Reply, Request, Transport
from tests.support.raw_http import ok, read_request

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
IDLE_S = 0.3  # the transports' idle-connection expiry in these tests (4 s in production)


@dataclass
class Seen:
    """What a fake server saw: one entry per connection, the requests' heads on it."""

    connections: list[list[bytes]] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


def chunked(*pieces: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"
    for p in pieces:
        out += f"{len(p):x}\r\n".encode() + p + b"\r\n"
    return out + b"0\r\n\r\n"


@asynccontextmanager
async def serve(
    answer: Callable[[bytes, int], bytes | None], host: str = "127.0.0.1"
) -> AsyncIterator[tuple[str, Seen]]:
    """A keep-alive server: `answer(request head, index on its connection)` gives the bytes to send
    (None: close the connection without answering)."""
    seen = Seen()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        heads: list[bytes] = []
        seen.connections.append(heads)
        try:
            while True:
                head = await read_request(r)
                heads.append(head)
                reply = answer(head, len(heads) - 1)
                if reply is None:
                    break
                w.write(reply)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()
            seen.closed.set()

    async with custom(handle, host) as base:
        yield base, seen


@asynccontextmanager
async def custom(handle: Handler, host: str = "127.0.0.1") -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, host, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    finally:
        server.close()


@dataclass
class Firehose:
    """A server that writes `head`, then `pieces` as fast as the client takes them, counting what it
    sent; `gone` is set once it stopped (done, or the client left)."""

    head: bytes
    pieces: Iterable[bytes]
    sent: int = 0
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(self.head)
        try:
            for piece in self.pieces:
                w.write(piece)
                await w.drain()
                self.sent += len(piece)
        except ConnectionError:
            pass
        finally:
            self.gone.set()
            w.close()


@dataclass
class Client:
    transport: Transport

    async def post(
        self, base: str, body: bytes = b"{}", headers: dict[str, str] | None = None, total_s: float = 10
    ) -> Reply:
        request = Request(
            "POST", base, "/v1/chat/completions", headers or {}, body, connect_s=2, total_s=total_s
        )
        return await self.transport.handle(request)


@pytest.fixture(params=["h1", "aiohttp"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    if request.param == "h1":
        h1 = H1Client(idle_s=IDLE_S)
        yield Client(h1)
        h1.close()
    else:
        session = new_session(16, keepalive_s=IDLE_S)
        yield Client(AiohttpTransport(session))
        await session.close()


async def body_of(resp: Reply) -> bytes:
    out = b""
    while chunk := await resp.readany():
        out += chunk
    return out


async def until(cond: Callable[[], bool], what: str, deadline_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.02)


# -- what is sent -------------------------------------------------------------------------------


async def test_the_request_asks_for_identity_and_names_host_and_port(client: Client) -> None:
    async with serve(lambda head, i: ok(b"{}")) as (base, seen):
        resp = await client.post(base, headers={"x-request-id": "r1"})
        assert resp.status == 200 and await resp.read() == b"{}"
        resp.release()
    head = seen.connections[0][0].lower()
    assert b"\r\naccept-encoding: identity\r\n" in head
    assert b"\r\nhost: " + base.removeprefix("http://").encode() + b"\r\n" in head
    assert b"\r\nx-request-id: r1\r\n" in head


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback here")
async def test_an_ipv6_literal_is_bracketed_in_host(client: Client) -> None:
    async with serve(lambda head, i: ok(b"{}"), host="::1") as (base, seen):
        resp = await client.post(base)
        assert resp.status == 200
        await resp.read()
        resp.release()
    port = base.rsplit(":", 1)[1]
    assert f"\r\nhost: [::1]:{port}\r\n".encode() in seen.connections[0][0].lower()


async def test_a_header_value_with_cr_or_lf_is_refused_before_anything_is_sent(client: Client) -> None:
    async with serve(lambda head, i: ok(b"{}")) as (base, seen):
        with pytest.raises(ValueError):
            await client.post(base, headers={"authorization": "Bearer key\n", "x-injected": "1"})
        assert all(not heads for heads in seen.connections)


# -- how a reply is framed ----------------------------------------------------------------------


async def test_a_chunked_body_reads_whole_and_in_pieces(client: Client) -> None:
    async with serve(lambda head, i: chunked(b"data: a\n\n", b"data: b\n\n")) as (base, _):
        resp = await client.post(base)
        assert await resp.read() == b"data: a\n\ndata: b\n\n"
        resp.release()
        resp = await client.post(base)
        assert await body_of(resp) == b"data: a\n\ndata: b\n\n"
        resp.release()


@pytest.mark.parametrize("close_header", [b"connection: close\r\n", b""], ids=["connection-close", "bare"])
async def test_a_close_delimited_body_is_complete_at_eof(client: Client, close_header: bytes) -> None:
    reply = b"HTTP/1.1 200 OK\r\n" + close_header + b"content-type: application/json\r\n\r\n"

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(reply + b'{"a":')
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"1}")
        await w.drain()
        w.close()  # the end of the body

    async with custom(handle) as base:
        resp = await client.post(base)
        assert resp.status == 200
        assert await resp.read() == b'{"a":1}'
        resp.release()
        resp = await client.post(base)  # a new connection: the last one ended with its body
        assert await body_of(resp) == b'{"a":1}'
        resp.release()


async def test_interim_1xx_responses_are_skipped(client: Client) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n"
    async with serve(lambda head, i: interim + ok(b'{"ok":1}', b"x-final: yes\r\n")) as (base, _):
        resp = await client.post(base)
        assert resp.status == 200
        assert resp.header(b"x-final") == "yes" and resp.header(b"link") is None
        assert await resp.read() == b'{"ok":1}'
        resp.release()


@pytest.mark.parametrize("encoding", [b"gzip", b"deflate", b"br"])
async def test_a_compressed_reply_is_a_clear_upstream_error(client: Client, encoding: bytes) -> None:
    body = gzip.compress(b'{"choices":[]}')
    async with serve(lambda head, i: ok(body, b"content-encoding: " + encoding + b"\r\n")) as (base, _):
        with pytest.raises(BadResponse) as info:
            await client.post(base)
    err, kind = classify(info.value, "p")
    assert err.status == 502 and "compressed" in err.message and kind == "client_error"


async def test_identity_content_encoding_is_accepted(client: Client) -> None:
    async with serve(lambda head, i: ok(b"{}", b"content-encoding: identity\r\n")) as (base, _):
        resp = await client.post(base)
        assert await resp.read() == b"{}"
        resp.release()


@pytest.mark.parametrize(
    "headers",
    [
        b"x-big: " + b"a" * (200 << 10) + b"\r\n",
        b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 90) for i in range(2000)),
    ],
    ids=["one-200KiB-header", "2000-headers"],
)
async def test_a_huge_header_block_is_an_upstream_error(client: Client, headers: bytes) -> None:
    async with serve(lambda head, i: b"HTTP/1.1 200 OK\r\n" + headers + b"content-length: 2\r\n\r\nok") as (
        base,
        _,
    ):
        with pytest.raises(TransportError) as info:
            resp = await client.post(base)
            await resp.read()
    err, _ = classify(info.value, "p")
    assert err.status == 502


async def test_an_endless_header_block_is_cut_not_buffered(client: Client) -> None:
    # 100,000 headers, ~10 MB, never a blank line.
    server = Firehose(b"HTTP/1.1 200 OK\r\n", (b"x-h%d: %s\r\n" % (i, b"v" * 90) for i in range(100_000)))
    async with custom(server) as base:
        with pytest.raises(TransportError):
            await client.post(base)
        await asyncio.wait_for(server.gone.wait(), 10)
    assert server.sent < 5_000_000  # the client hung up long before the server ran out of headers


# -- connections --------------------------------------------------------------------------------


async def test_a_connection_the_server_closed_while_idle_is_not_reused(client: Client) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(ok(b"{}"))  # keep-alive (HTTP/1.1's default)...
        await w.drain()
        w.close()  # ...and closed right after, like a server whose keep-alive ran out

    async with custom(handle) as base:
        for _ in range(3):
            resp = await client.post(base)
            assert await resp.read() == b"{}"
            resp.release()
            await asyncio.sleep(0.1)  # the close arrives while the connection is idle


async def test_idle_connections_expire_before_the_servers_keep_alive(client: Client) -> None:
    async with serve(lambda head, i: ok(b"{}")) as (base, seen):
        for _ in range(2):
            resp = await client.post(base)
            await resp.read()
            resp.release()
        assert len(seen.connections) == 1  # reused while fresh
        await asyncio.sleep(IDLE_S * 3)
        resp = await client.post(base)
        await resp.read()
        resp.release()
        assert len(seen.connections) == 2  # idle past its expiry: a new one


# -- streams ------------------------------------------------------------------------------------


async def test_a_crlf_framed_sse_stream_is_split_and_relayed_unchanged(client: Client) -> None:
    events = [
        b": keep-alive\r\n\r\n",
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\r\n\r\n',
        b"event: message\r\nid: 2\r\n"
        b'data:{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\r\n\r\n',
        b"data:[DONE]\r\n\r\n",
    ]
    # Chunk boundaries fall inside the CRLF pairs on purpose.
    stream = b"".join(events)
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    async with serve(lambda head, i: chunked(*pieces)) as (base, _):
        resp = await client.post(base)
        split = SSESplitter(strip_usage=False)
        out = b""
        while chunk := await resp.readany():
            out += split.feed(chunk)[0]
        resp.release()
    assert out == stream
    assert split.saw_done and split.events == 2
    assert split.usage == {"prompt_tokens": 1, "completion_tokens": 1}


async def test_a_slow_reader_holds_the_server_back_and_its_close_reaches_the_server(client: Client) -> None:
    event = b"data: " + b"x" * 65_000 + b"\n\n"
    frame = f"{len(event):x}\r\n".encode() + event + b"\r\n"
    total = 4096 * len(frame)  # ~256 MiB if nothing held the server back
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    server = Firehose(head, (frame for _ in range(4096)))
    async with custom(server) as base:
        resp = await client.post(base)
        assert (await resp.readany()).startswith(b"data: ")
        # The reader stops. The server must stall: the transport's buffer is bounded, the rest waits
        # in socket buffers, and the server's drain blocks (vLLM's backpressure).
        last = -1
        while server.sent != last:
            last = server.sent
            await asyncio.sleep(0.3)
        assert server.sent < total // 4
        resp.close()  # the reader leaves: the server sees it at once (vLLM aborts the request)
        await asyncio.wait_for(server.gone.wait(), 10)
    assert server.sent < total


async def test_failures_are_the_gateways_transport_errors(client: Client) -> None:
    async def early_close(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await w.drain()
        w.close()

    async with custom(early_close) as base:
        resp = await client.post(base)
        with pytest.raises(TransportError) as info:
            await resp.read()
        resp.close()
    err, kind = classify(info.value, "p")
    assert kind == "disconnect" and err.status == 502


async def test_a_refused_connection_is_a_connect_failure(client: Client) -> None:
    async with custom(lambda r, w: asyncio.sleep(0)) as base:
        pass  # the server is gone: its port refuses
    with pytest.raises(TransportError) as info:
        await client.post(base)
    err, kind = classify(info.value, "p")
    assert kind == "connect" and err.status == 503


async def test_the_total_timeout_is_a_transport_timeout(client: Client) -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await w.drain()
        await asyncio.sleep(5)

    async with custom(silent) as base:
        resp = await client.post(base, total_s=0.5)
        assert await resp.readany() == b"first"
        with pytest.raises(TransportTimeout) as info:
            while await resp.readany():
                pass
        resp.close()
    err, kind = classify(info.value, "p")
    assert kind == "timeout" and err.status == 504
