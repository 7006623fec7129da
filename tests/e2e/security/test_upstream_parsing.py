"""The upstream side reads what a pool may send (issue 25, "upstream parsing"): a real gateway process
in front of a hostile pool process. A CRLF-framed stream with comments, `event:`/`id:` lines and
`data:[DONE]` is relayed byte for byte, its usage metered, and the replica's breaker counts no
failure; a stream of keep-alives alone is no first token; a gzip answer is refused clearly. Both
upstream clients (the lean one and aiohttp) are run."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.hostile_pool import CRLF_STREAM, gateway_before_hostile_pool
from tests.support.poll import wait_until
from tests.support.prom import metric

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["h1", "aiohttp"])
def gateway(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    with gateway_before_hostile_pool(tmp_path_factory.mktemp("hostile"), request.param) as (base, _):
        yield base


def _stream(base: str, alias: str, usage: bool = False) -> httpx.Response:
    body: dict[str, object] = {
        "model": alias,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=20)


def test_a_crlf_stream_is_relayed_complete_and_the_replica_stays_healthy(gateway: str) -> None:
    for _ in range(4):
        resp = _stream(gateway, "crlf", usage=True)
        assert resp.status_code == 200
        assert resp.content == CRLF_STREAM  # byte for byte: nothing re-framed, nothing held back
    resp = _stream(gateway, "crlf")  # no usage asked for: the usage event is cut, the rest as sent
    assert resp.status_code == 200
    assert b'"usage"' not in resp.content and resp.content.endswith(b"data:[DONE]\r\n\r\n")
    text = httpx.get(f"{gateway}/metrics", timeout=5).text
    assert metric(text, "llmgw_upstream_errors_total", 'pool="crlf"') == 0
    assert metric(text, "llmgw_replica_breaker_opens_total", 'pool="crlf"') == 0
    assert metric(text, "llmgw_replica_breaker_state", 'pool="crlf"') == 0
    # The usage behind the event: and id: lines was read: 2 output tokens per stream.
    assert metric(text, "llmgw_tokens_total", 'direction="output",model="crlf",pool="crlf"') == 5 * 2


def test_keep_alives_are_not_a_first_token(gateway: str) -> None:
    resp = _stream(gateway, "keepalive")
    assert resp.status_code == 504, resp.text
    assert resp.json()["error"]["code"] == "upstream_timeout"


def test_a_compressed_answer_is_a_clear_upstream_error(gateway: str) -> None:
    body = {"model": "gzip", "messages": [{"role": "user", "content": "hi"}]}
    resp = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=20)
    assert resp.status_code == 502, resp.text
    assert resp.json()["error"]["message"] == "pool 'gzip' sent a compressed response"


def test_an_event_that_never_ends_is_cut_at_the_bound(gateway: str) -> None:
    resp = _stream(gateway, "endless")
    assert resp.status_code == 200
    events = [e for e in resp.text.split("\n\n") if e]
    assert '"content":"a"' in events[0]
    assert events[-1] == "data: [DONE]"
    assert "pool 'endless' sent a stream event larger than 1024 KiB" in events[-2]
    assert len(resp.content) < 64 << 10  # none of the oversized event was relayed


def test_nan_and_inf_in_a_replicas_metrics_never_break_a_pick(gateway: str) -> None:
    """Two replicas behind prefix affinity report NaN/±Inf among vLLM's queue gauges (valid exposition).
    NaN reached the load bound's math.ceil: every pick raised, a 500. The samples are skipped now."""
    waiting = "llmgw_replica_waiting_requests"

    def scraped() -> str:
        text = httpx.get(f"{gateway}/metrics", timeout=5).text
        return text if text.count(f'{waiting}{{pool="badload"') == 2 else ""

    wait_until(scraped, "a scrape of both badload replicas", timeout=10)
    body = {"model": "badload", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(3):
        resp = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=20)
        assert resp.status_code == 200, resp.text
        streamed = _stream(gateway, "badload")
        assert streamed.status_code == 200, streamed.text
        assert streamed.content.endswith(b"data: [DONE]\n\n")
    assert metric(scraped(), waiting, 'pool="badload"') == 4  # 2 each: NaN skipped, +Inf/-Inf too


def test_a_client_leaving_after_the_last_event_is_not_a_499(gateway: str) -> None:
    """Issue 40 (Codex closes on `response.completed`): the pool's chunked body ends 1.5 s after its
    [DONE]; a client that hangs up once it has the last event got the whole answer: 200, not 499."""
    before = metric(httpx.get(f"{gateway}/metrics", timeout=5).text, "llmgw_requests_total", 'code="499"')
    ends = {
        "/v1/chat/completions": (b"data: [DONE]", {"messages": [{"role": "user", "content": "hi"}]}),
        "/v1/responses": (b"event: response.completed", {"input": "hi"}),
        "/v1/messages": (
            b"event: message_stop",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        ),
    }
    for path, (last, body) in ends.items():
        with httpx.stream(
            "POST", f"{gateway}{path}", json={"model": "lingering", "stream": True, **body}, timeout=20
        ) as r:
            assert r.status_code == 200
            seen = b""
            for piece in r.iter_bytes():
                seen += piece
                if last in seen:
                    break  # hang up with the answer in hand, before the pool's body ends
        assert last in seen, (path, seen)

    def counted() -> bool:
        text = httpx.get(f"{gateway}/metrics", timeout=5).text
        return metric(text, "llmgw_requests_total", 'model="lingering"') >= 3

    wait_until(counted, "the three lingering requests counted", timeout=10)
    after = metric(httpx.get(f"{gateway}/metrics", timeout=5).text, "llmgw_requests_total", 'code="499"')
    assert after == before
