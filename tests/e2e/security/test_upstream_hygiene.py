"""Upstream detail never reaches a client (issue 25, "upstream detail leaks"): a real gateway process
in front of a hostile pool process whose errors hold internal URLs, host names, an address and a
token. The client gets the pool's name, the status and a reason in the gateway's words; the pool's
text is in the gateway's log beside the request id; a pool's `retry-after: 99999999` arrives
clamped to 60 s. Both upstream clients (the lean one and aiohttp) are run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.hostile_pool import LEAK, SECRETS, gateway_before_hostile_pool

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["h1", "aiohttp"])
def gateway(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Path]]:
    with gateway_before_hostile_pool(tmp_path_factory.mktemp("hostile"), request.param) as running:
        yield running


def _chat(base: str, alias: str, stream: bool = False) -> httpx.Response:
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=20)


def _assert_no_secret(resp: httpx.Response) -> None:
    seen = resp.text + "".join(f"{k}: {v}\n" for k, v in resp.headers.items())
    for secret in SECRETS:
        assert secret not in seen, (secret, seen)


def _logged_with_request_id(log: Path, rid: str, text: str) -> bool:
    return any(rid in line and text in line for line in log.read_text(errors="replace").splitlines())


@pytest.mark.parametrize(
    ("alias", "status", "code"),
    [
        ("leak500", 502, "upstream_error"),
        ("leak400", 400, None),
        ("leak422", 422, "unprocessable_entity"),
        ("busy", 429, "rate_limit_exceeded"),
        ("down", 503, "upstream_unavailable"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_pools_error_text_stays_in_the_log(
    gateway: tuple[str, Path], alias: str, status: int, code: str | None, stream: bool
) -> None:
    base, log = gateway
    resp = _chat(base, alias, stream)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code
    assert f"pool '{alias}'" in err["message"] and str(status if status != 502 else 500) in err["message"]
    _assert_no_secret(resp)
    assert _logged_with_request_id(log, resp.headers["x-request-id"], LEAK)


@pytest.mark.parametrize("alias", ["busy", "down"])
def test_a_pools_retry_after_is_clamped(gateway: tuple[str, Path], alias: str) -> None:
    base, _ = gateway
    resp = _chat(base, alias)
    assert resp.status_code in (429, 503)
    assert 0 <= int(resp.headers["retry-after"]) <= 60


def test_a_connect_failure_does_not_show_the_address(gateway: tuple[str, Path]) -> None:
    base, log = gateway
    resp = _chat(base, "refused")
    assert resp.status_code == 503, resp.text
    message = resp.json()["error"]["message"]
    assert message == "pool 'refused' is unreachable"
    assert "127.0.0.1" not in resp.text
    assert _logged_with_request_id(log, resp.headers["x-request-id"], "pool 'refused'")


def test_a_mid_stream_error_event_is_relayed_in_the_gateways_words(gateway: tuple[str, Path]) -> None:
    base, log = gateway
    resp = _chat(base, "midstream", stream=True)
    assert resp.status_code == 200
    events = [e for e in resp.text.split("\n\n") if e]
    assert '"content":"a"' in events[0]
    assert events[-1] == "data: [DONE]"
    assert "pool 'midstream' reported an error during the stream" in events[-2]
    _assert_no_secret(resp)
    assert _logged_with_request_id(log, resp.headers["x-request-id"], SECRETS[2])
