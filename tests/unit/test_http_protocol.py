"""The coalescing httptools protocol: one socket write per unary response, uvicorn's behaviour otherwise.

The write counts are checked on a recording transport (deterministic); keep-alive, HEAD, pipelining,
streams and `connection: close` against a real uvicorn server on a real socket.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.http_protocol import CoalescingHttpToolsProtocol
from tests.support.procs import free_port
from tests.support.thread_server import uvicorn_in_thread

BODY = b'{"ok": true}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    while (await receive()).get("more_body"):
        pass
    if path == "/stream":
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        for i in range(3):
            await send({"type": "http.response.body", "body": b"part%d;" % i, "more_body": True})
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if path == "/fail-after-start":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        raise RuntimeError("the app failed after starting its response")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY, "more_body": False})


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _writes_for(protocol_class: type[HttpToolsProtocol], request: bytes) -> RecordingTransport:
    config = uvicorn.Config(app=app, http=protocol_class, lifespan="off", log_level="warning")
    config.load()
    state = ServerState()
    protocol = protocol_class(config=config, server_state=state, app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(200):
        if not state.tasks:
            break
        await asyncio.sleep(0.005)
    return transport


async def test_a_unary_response_is_one_write_with_head_and_body() -> None:
    request = b"POST /unary HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}"
    ours = await _writes_for(CoalescingHttpToolsProtocol, request)
    assert len(ours.writes) == 1
    head, _, body = ours.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 12" in head
    assert body == BODY
    # The stock protocol writes head and body separately: what this module exists to save.
    stock = await _writes_for(HttpToolsProtocol, request)
    assert len(stock.writes) == 2 and b"".join(stock.writes) == ours.writes[0]


async def test_a_connection_close_request_gets_its_bytes_before_the_close() -> None:
    request = b"GET /unary HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
    t = await _writes_for(CoalescingHttpToolsProtocol, request)
    assert len(t.writes) == 1 and t.writes[0].endswith(BODY) and b"connection: close" in t.writes[0]
    assert t.closed


async def test_streams_are_written_as_they_come() -> None:
    t = await _writes_for(CoalescingHttpToolsProtocol, b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
    assert len(t.writes) == 5  # the head, three chunks, the last chunk: nothing held
    assert t.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n")


async def test_a_held_head_is_dropped_when_the_app_fails_and_the_connection_closes() -> None:
    t = await _writes_for(CoalescingHttpToolsProtocol, b"GET /fail-after-start HTTP/1.1\r\nhost: t\r\n\r\n")
    assert t.writes == [] and t.closed


# --- a real server on a real socket ------------------------------------------------------------


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        app=app, host="127.0.0.1", port=port, http=CoalescingHttpToolsProtocol, log_level="warning"
    )
    with uvicorn_in_thread(config):
        yield port


def _read_response(sock: socket.socket, buf: bytearray, head_only: bool = False) -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the head"
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = 0 if head_only else int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the body"
        rest += chunk
    buf[:] = rest[length:]
    return head, rest[:length]


def test_keep_alive_head_and_pipelined_requests(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        buf = bytearray()
        sock.sendall(b"GET /unary HTTP/1.1\r\nhost: t\r\n\r\n")
        head, body = _read_response(sock, buf)
        assert head.startswith(b"HTTP/1.1 200") and body == BODY
        sock.sendall(b"HEAD /unary HTTP/1.1\r\nhost: t\r\n\r\n")
        head, body = _read_response(sock, buf, head_only=True)
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: 12" in head and body == b""
        sock.sendall(b"GET /unary HTTP/1.1\r\nhost: t\r\n\r\n" * 3)  # pipelined
        for _ in range(3):
            head, body = _read_response(sock, buf)
            assert head.startswith(b"HTTP/1.1 200") and body == BODY
        assert buf == b""


def test_connection_close_and_stream_over_a_socket(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
        first = sock.recv(65536)
        while b"part0;" not in first:  # the first chunk arrives while the app still sleeps
            first += sock.recv(65536)
        assert b"part2;" not in first
        data = first
        while not data.endswith(b"0\r\n\r\n"):
            data += sock.recv(65536)
        assert b"part1;" in data and b"part2;" in data
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /unary HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        assert data.endswith(BODY) and b"connection: close" in data
