"""`POST /v1/feedback` authenticates before it reads a body and spends the key's request rate (issue 39).

Before: FastAPI parsed the body before the handler ran, so an unauthenticated 3.5 MB body was read and
echoed back in a 3.5 MB error, and 300 posts from a 10 requests/min key got no 429. The same holds
for the admin API's key creation (authenticated first already; now its body is capped too).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

RPM = 5


@dataclass(frozen=True)
class Gw:
    url: str
    key: str
    admin: str


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    tmp = tmp_path_factory.mktemp("feedback")
    port = free_port()
    key, admin = generate_key(), generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: p, model: sim, endpoints: {{static: ["http://127.0.0.1:{port}"]}}}}
models:
  - {{name: m, route: {{pool: p}}}}
limits:
  backend: memory
tenancy:
  keys:
    - {{id: slow, sha256: {hash_key(key)}, org: acme, app: e2e, limits: {{requests_per_min: {RPM}}}}}
"""
    )
    with Stack(tmp) as s:
        s.sim("sim", "--profile", "instant", port=port)
        yield Gw(s.gateway(policy, env={"LLMGW_ADMIN_KEY": admin}).url, key, admin)


def _raw_post(url: str, path: str, headers: dict[str, str], declared: int, sent: bytes) -> tuple[int, bytes]:
    """A POST that declares `declared` body bytes and sends only `sent`: the answer must come without
    the rest (a server that reads the body first would wait for it)."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"content-length: {declared}\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + sent)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        status = int(data.split(b" ", 2)[1])
        return status, data


@pytest.mark.parametrize("path", ["/v1/feedback", "/admin/keys"])
def test_an_unauthenticated_body_is_never_read(gw: Gw, path: str) -> None:
    # 3.5 MB declared, 1 KB sent: the 401 comes before the body is read.
    status, data = _raw_post(gw.url, path, {}, 3_500_000, b"{" + b" " * 1023)
    assert status == 401
    assert len(data) < 2_000


def test_a_large_authenticated_body_is_413_before_it_is_read(gw: Gw) -> None:
    status, _ = _raw_post(gw.url, "/v1/feedback", {"authorization": f"Bearer {gw.key}"}, 3_500_000, b"{")
    assert status == 413


def test_errors_do_not_echo_the_body(gw: Gw) -> None:
    huge = "x" * 10_000
    resp = httpx.post(
        f"{gw.url}/v1/feedback",
        json={"request_id": "r", "accepted": huge},
        headers={"authorization": f"Bearer {gw.key}"},
        timeout=10,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "accepted"
    assert len(resp.content) < 1_000 and "xxxxxxxxxx" not in resp.text


def test_feedback_spends_the_keys_request_rate(gw: Gw) -> None:
    statuses = []
    with httpx.Client(timeout=10) as client:
        for i in range(3 * RPM):
            resp = client.post(
                f"{gw.url}/v1/feedback",
                json={"request_id": f"unknown-{i}", "accepted": True},
                headers={"authorization": f"Bearer {gw.key}"},
            )
            statuses.append(resp.status_code)
    assert set(statuses) <= {404, 429, 400}
    assert statuses.count(429) >= RPM, (
        statuses
    )  # at most the key's rate got through (this test's 3 bodies too)


def test_failed_admin_authentications_are_throttled_per_address(gw: Gw) -> None:
    """Issue 39: the admin API never throttled failed attempts. Five wrong keys from one address, then
    even the right key waits (429 with retry-after) instead of being compared."""
    url = f"{gw.url}/admin/keys"
    statuses = [
        httpx.get(url, headers={"authorization": f"Bearer wrong-{i}"}, timeout=10).status_code
        for i in range(6)
    ]
    # (an earlier test of this module failed once from this address too)
    assert statuses[:4] == [401] * 4 and statuses[-1] == 429, statuses
    blocked = httpx.get(url, headers={"authorization": f"Bearer {gw.admin}"}, timeout=10)
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
    assert blocked.json()["error"]["code"] == "admin_auth_throttled"
