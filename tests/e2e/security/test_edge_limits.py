"""The HTTP edge against hostile clients (issue 25), on a real gateway process in front of a real simulator.

Raw sockets where a client library would be too polite to misbehave. Each test prints what it measured
(`pytest -s`). Limits are lowered through the environment so that the tests take seconds: headers in
2 s, bodies at >= 1 KiB/s after 1 s and within 4 s, a response unread for 2 s, 40 connections.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack

HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 4.0
WRITE_STALL_S = 2.0
MAX_CONNECTIONS = 40


@dataclass(frozen=True)
class Edge:
    port: int
    gateway: str
    sim: str
    key: str
    pid: int


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    tmp: Path = tmp_path_factory.mktemp("edge")
    sim_port, gw_port = free_port(), free_port()
    sim = f"http://127.0.0.1:{sim_port}"
    key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - name: p
    model: sim
    endpoints: {{static: ["{sim}"]}}
models:
  - {{name: m, route: {{pool: p}}, max_tokens: {{default: 16, cap: 50000}}}}
tenancy:
  keys:
    - {{id: edge, sha256: {hash_key(key)}, org: acme, app: edge}}
"""
    )
    env = {
        "LLMGW_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "LLMGW_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "LLMGW_BODY_GRACE_S": "1",
        "LLMGW_WRITE_STALL_S": str(WRITE_STALL_S),
        "LLMGW_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "LLMGW_SEND_BUFFER_BYTES": "16384",
    }
    # 1 ms per decode step: a long answer is produced far faster than a client that stopped reading takes it.
    sim_extra = ["--profile", "instant", "--step-base-ms", "1", "--output-len-mean", "30000"]
    with Stack(tmp) as s:
        s.sim("sim", *sim_extra, port=sim_port, name="sim")
        gw = s.gateway(policy, port=gw_port, env=env)
        yield Edge(gw_port, gw.url, sim, key, gw.proc.pid)


def _connect(edge: Edge, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", edge.port))
    s.settimeout(30)
    return s


def _read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the one response the server sends before closing."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _assert_openai_error(headers: dict[str, str], body: bytes, code: str) -> None:
    assert headers["content-type"] == "application/json"
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code, err


def test_slowloris_headers_are_cut_at_the_header_timeout(edge: Edge) -> None:
    s = _connect(edge)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    held = 0.0
    try:
        for i in range(200):  # one header byte every 100 ms: 20 s unless the server cuts it
            s.sendall(b"X-A: b\r\n"[i % 8 : i % 8 + 1])
            time.sleep(0.1)
    except OSError:
        pass
    status, headers, body = _read_response(s)
    held = time.monotonic() - t0
    print(f"\nslowloris headers: answered {status} after {held:.1f} s (limit {HEADER_TIMEOUT_S:g} s)")
    assert status == 408
    _assert_openai_error(headers, body, "request_timeout")
    assert held < HEADER_TIMEOUT_S + 3  # cut, not held for the 20 s the client wanted


def test_a_silent_connection_is_closed(edge: Edge) -> None:
    s = _connect(edge)
    t0 = time.monotonic()
    status, _, _ = _read_response(s)
    held = time.monotonic() - t0
    print(f"\nsilent connection: answered {status} and closed after {held:.1f} s")
    assert status == 408 and held < HEADER_TIMEOUT_S + 3


def test_a_body_at_one_byte_per_100ms_is_cut(edge: Edge) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 900 + b'"}]}'
    s = _connect(edge)
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {edge.key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    t0 = time.monotonic()
    s.sendall(head.encode())
    try:
        for b in body:
            s.sendall(bytes([b]))
            time.sleep(0.1)
    except OSError:
        pass
    status, headers, payload = _read_response(s)
    held = time.monotonic() - t0
    print(f"\nslow body (10 B/s): answered {status} after {held:.1f} s")
    assert status == 408
    _assert_openai_error(headers, payload, "request_timeout")
    assert held < BODY_TIMEOUT_S + 3


@pytest.mark.parametrize(
    ("what", "headers"),
    [
        ("one 64 KB header", [("X-Big", "a" * 65536)]),
        ("1,000 headers", [(f"X-H{i}", "v") for i in range(1000)]),
        ("a 32 MiB header", [("X-Huge", "a" * (32 << 20))]),
    ],
)
def test_oversized_header_blocks_get_431(edge: Edge, what: str, headers: list[tuple[str, str]]) -> None:
    s = _connect(edge)
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers)
    request = f"GET /healthz HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode()
    try:
        s.sendall(request)
    except OSError:
        pass  # the server answered and closed before the client finished sending
    status, resp_headers, body = _read_response(s)
    print(f"\n{what}: {status}")
    assert status == 431
    _assert_openai_error(resp_headers, body, "request_headers_too_large")


def test_parser_errors_are_json(edge: Edge) -> None:
    s = _connect(edge)
    s.sendall(b"NOT-HTTP garbage\r\n\r\n")
    status, headers, body = _read_response(s)
    assert status == 400
    _assert_openai_error(headers, body, "invalid_http")


def _nested(depth: int, max_tokens: int = 4) -> str:
    """A chat body with a pass-through field nested `depth` deep (as text: Python's json recurses)."""
    return (
        f'{{"model": "m", "max_tokens": {max_tokens}, "messages": [{{"role": "user", "content": "hi"}}], '
        f'"metadata_passthrough": {"[" * depth + "]" * depth}}}'
    )


@pytest.mark.parametrize("depth", [100, 300, 1000])
def test_deep_json_gets_400_not_500(edge: Edge, depth: int) -> None:
    r = httpx.post(
        f"{edge.gateway}/v1/chat/completions",
        content=_nested(depth),
        headers={"Authorization": f"Bearer {edge.key}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "nesting_too_deep"


def test_moderate_nesting_still_reaches_the_pool(edge: Edge) -> None:
    r = httpx.post(
        f"{edge.gateway}/v1/chat/completions",
        content=_nested(20),
        headers={"Authorization": f"Bearer {edge.key}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert r.status_code != 400 or r.json()["error"]["code"] != "nesting_too_deep", r.text


def test_no_redirect_on_a_trailing_slash(edge: Edge) -> None:
    r = httpx.post(
        f"{edge.gateway}/v1/chat/completions/",
        json={"model": "m", "messages": []},
        headers={"Authorization": f"Bearer {edge.key}", "Host": "evil.example"},
        timeout=10,
    )
    assert r.status_code == 404 and "location" not in r.headers
    assert r.json()["error"]["code"] == "not_found"


def test_head_on_health_endpoints(edge: Edge) -> None:
    for path in ("/healthz", "/readyz"):
        r = httpx.head(f"{edge.gateway}{path}", timeout=10)
        assert r.status_code == 200, (path, r.status_code)


def test_connections_over_the_cap_get_503_json(edge: Edge) -> None:
    socks = [_connect(edge) for _ in range(MAX_CONNECTIONS + 10)]
    try:
        refused = 0
        for s in socks[MAX_CONNECTIONS:]:
            status, headers, body = _read_response(s)
            assert status == 503
            _assert_openai_error(headers, body, "upstream_unavailable")
            refused += 1
        print(f"\n{len(socks)} connections at a cap of {MAX_CONNECTIONS}: {refused} answered 503")
    finally:
        for s in socks:
            s.close()
    time.sleep(0.2)  # the server notices the closes
    assert httpx.get(f"{edge.gateway}/healthz", timeout=10).status_code == 200


def _sim_running(edge: Edge) -> float:
    return metric(httpx.get(f"{edge.sim}/metrics", timeout=5).text, "vllm:num_requests_running")


def test_a_client_that_stops_reading_is_dropped_and_the_pool_call_aborted(edge: Edge) -> None:
    body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "max_tokens": 30000,
            "messages": [{"role": "user", "content": "write a very long story"}],
        }
    ).encode()
    s = _connect(edge, rcvbuf=4096)
    s.sendall(
        (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {edge.key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
    )
    s.recv(1024)  # the response has started; from here on the client reads nothing
    t0 = time.monotonic()
    seen_running = [False]

    def aborted() -> bool:
        running_now = _sim_running(edge)
        seen_running[0] = seen_running[0] or running_now >= 1
        return seen_running[0] and running_now == 0

    wait_until(aborted, "the pool's request to run, then be aborted", timeout=WRITE_STALL_S + 15)
    freed = time.monotonic() - t0
    s.close()
    print(f"\nslow reader: the pool's request was aborted {freed:.1f} s after the client stopped reading")
    assert seen_running[0] and _sim_running(edge) == 0
    # 30,000 tokens at 1 ms per step take 30 s or more: it ended because the gateway gave up on the client.
    assert freed < WRITE_STALL_S + 15


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_an_unauthenticated_body_is_refused_before_it_is_read(edge: Edge) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (4_000_000) + b'"}]}'
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-not-a-key\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    # The 401 comes while the client has sent only its first 64 KiB: the key is checked first.
    s = _connect(edge)
    s.sendall(head + body[:65536])
    status = int(s.recv(65536).split(b" ", 2)[1])
    s.close()
    assert status == 401
    # What 20 whole 4 MiB unauthenticated requests cost the gateway (printed, not asserted: figures).
    cpu0, rss0 = _cpu_s(edge.pid), _rss_mb(edge.pid)
    with httpx.Client(timeout=30) as client:
        for _ in range(20):
            r = client.post(
                f"{edge.gateway}/v1/chat/completions",
                content=body,
                headers={"Authorization": "Bearer sk-not-a-key", "Content-Type": "application/json"},
            )
            assert r.status_code == 401
    cpu = (_cpu_s(edge.pid) - cpu0) / 20
    print(
        f"\nunauthenticated 4 MiB body: {cpu * 1000:.1f} ms gateway CPU per request, "
        f"RSS {rss0:.0f} -> {_rss_mb(edge.pid):.0f} MB after 20"
    )
