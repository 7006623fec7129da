"""The edge holds a response head until the first body write (gateway/edge/protocol.py `_HeadHold`): over
a real gateway process, with raw sockets, answers that have no body write after the head (HEAD), an
`Expect: 100-continue` request, and keep-alive reuse after each still come out whole and in order."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.procs import write_policy
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("head-hold")
    with Stack(tmp) as s:
        sim = s.sim("small", "--profile", "instant")
        gw = s.gateway(write_policy(tmp / "policy.yaml", {"small": sim.url}, "tenancy: {auth: disabled}\n"))
        yield gw.port


def _read_response(sock: socket.socket, head_only: bool = False) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if head_only:
        return head
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_head_then_get_on_one_connection(gateway: int) -> None:
    with socket.create_connection(("127.0.0.1", gateway), timeout=5) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        head = _read_response(sock, head_only=True)
        assert head.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = _read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"}")


def test_expect_100_continue_then_the_answer(gateway: int) -> None:
    body = b'{"model":"small","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
    with socket.create_connection(("127.0.0.1", gateway), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
        sock.sendall(body)
        answer = _read_response(sock) if interim.endswith(b"\r\n\r\n") else interim
        assert answer.startswith(b"HTTP/1.1 200") and b'"choices"' in answer
