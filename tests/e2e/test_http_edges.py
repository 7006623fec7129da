"""Bad input, disconnects, health and metrics over real HTTP against the real stack."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import MAX_BODY, SharedStack
from tests.support.poll import wait_until

pytestmark = pytest.mark.e2e

OK = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _auth(stack: SharedStack) -> dict[str, str]:
    return {"authorization": f"Bearer {stack.api_key}"}


def _err(resp: httpx.Response) -> dict[str, Any]:
    data = resp.json()
    assert set(data["error"]) == {"message", "type", "param", "code"}
    assert resp.headers["x-request-id"]
    return dict(data["error"])


@pytest.mark.parametrize(
    ("path", "content", "status", "param"),
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b"", 400, None),
        ("/v1/chat/completions", b"[]", 400, None),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', 400, "model"),
        ("/v1/chat/completions", b'{"model": "small"}', 400, "messages"),
        ("/v1/chat/completions", b'{"model": 5, "messages": []}', 400, "model"),
        ("/v1/chat/completions", b'{"model": "small", "messages": "hi"}', 400, "messages"),
        (
            "/v1/chat/completions",
            b'{"model": "small", "messages": [{"role": "user"}], "stream": 1}',
            400,
            "stream",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "small", "messages": [{"role": "u"}], "max_tokens": "9"}',
            400,
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "model",
        ),
        ("/v1/completions", b'{"model": "small"}', 400, "prompt"),
        ("/v1/embeddings", b'{"model": "small", "input": {}}', 400, "input"),
    ],
)
def test_bad_input_gets_a_4xx_openai_error(
    stack: SharedStack, path: str, content: bytes, status: int, param: str | None
) -> None:
    headers = {"content-type": "application/json", **_auth(stack)}
    resp = httpx.post(stack.gateway + path, content=content, headers=headers, timeout=10)
    assert resp.status_code == status, resp.text
    assert _err(resp)["param"] == param


def test_body_over_the_limit_is_413(stack: SharedStack) -> None:
    big = {**OK, "messages": [{"role": "user", "content": "x" * (MAX_BODY + 1)}]}
    resp = httpx.post(f"{stack.gateway}/v1/chat/completions", json=big, headers=_auth(stack), timeout=10)
    assert resp.status_code == 413
    assert _err(resp)["code"] == "request_too_large"

    def chunks() -> Any:  # no content-length: the limit is enforced while reading
        yield b'{"model": "small", "messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY // 1000 + 2):
            yield b"y" * 1000
        yield b'"}]}'

    resp = httpx.post(
        f"{stack.gateway}/v1/chat/completions", content=chunks(), headers=_auth(stack), timeout=10
    )
    assert resp.status_code == 413


def test_unknown_route_and_method_are_openai_errors(stack: SharedStack) -> None:
    resp = httpx.get(f"{stack.gateway}/v1/nothing", timeout=5)
    assert resp.status_code == 404 and _err(resp)["code"] == "not_found"
    resp = httpx.get(f"{stack.gateway}/v1/chat/completions", timeout=5)
    assert resp.status_code == 405 and _err(resp)["code"] == "method_not_allowed"


def test_request_id_is_echoed_or_generated(stack: SharedStack) -> None:
    resp = httpx.post(
        f"{stack.gateway}/v1/chat/completions",
        json=OK,
        headers={"x-request-id": "abc-123", **_auth(stack)},
        timeout=10,
    )
    assert resp.headers["x-request-id"] == "abc-123"
    resp = httpx.post(
        f"{stack.gateway}/v1/chat/completions",
        json=OK,
        headers={"x-request-id": "bad id;" * 20, **_auth(stack)},
        timeout=10,
    )
    assert resp.headers["x-request-id"].startswith("req_")


def test_health_ready_and_metrics(stack: SharedStack) -> None:
    assert httpx.get(f"{stack.gateway}/healthz", timeout=5).json() == {"status": "ok"}
    assert httpx.get(f"{stack.gateway}/readyz", timeout=5).status_code == 200
    httpx.post(
        f"{stack.gateway}/v1/chat/completions", json={**OK, "stream": True}, headers=_auth(stack), timeout=10
    )
    text = httpx.get(f"{stack.gateway}/metrics", timeout=5).text
    for name in (
        "llmgw_requests_total",
        "llmgw_request_duration_seconds_bucket",
        "llmgw_time_to_first_token_seconds_bucket",
        "llmgw_time_per_output_token_seconds_bucket",
        "llmgw_tokens_total",
        "llmgw_gateway_overhead_seconds_bucket",
        "llmgw_upstream_errors_total",
        "llmgw_inflight_requests",
    ):
        assert name in text, name
    assert 'llmgw_requests_total{code="200",endpoint="chat",model="small",pool="small"}' in text


def _running(stack: SharedStack) -> float:
    return stack.sim_metric("slow", "vllm:num_requests_running")


def _generated(stack: SharedStack) -> float:
    return stack.sim_metric("slow", "vllm:generation_tokens_total")


def _generation_stopped(stack: SharedStack) -> bool:
    """The upstream request left the batch and no more tokens are made. Like vLLM 0.32, the simulator
    does not count a client abort in request_success_total, so that counter cannot tell."""
    if _running(stack) > 0:
        return False
    generated = _generated(stack)
    time.sleep(0.15)  # three 50 ms steps of the slow pool
    return _generated(stack) == generated


def test_client_leaving_mid_stream_aborts_upstream_within_1s(stack: SharedStack) -> None:
    body = {"model": "slow", "messages": [{"role": "user", "content": "write a lot"}], "stream": True}
    url = f"{stack.gateway}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=_auth(stack), timeout=30) as resp:
        assert resp.status_code == 200
        seen = 0
        for _ in resp.iter_raw():
            seen += 1
            if seen >= 3:
                break  # leaving iter_raw closes the response: the client is gone from here on
    left = time.monotonic()
    wait_until(
        lambda: _generation_stopped(stack), "the simulator to stop generating", timeout=1.0, interval=0.02
    )
    assert time.monotonic() - left <= 1.5


def test_client_leaving_a_unary_request_aborts_upstream(stack: SharedStack) -> None:
    before = _generated(stack)
    body = {"model": "slow", "messages": [{"role": "user", "content": "write a lot"}]}

    def call() -> None:
        try:
            httpx.post(f"{stack.gateway}/v1/chat/completions", json=body, headers=_auth(stack), timeout=0.5)
        except httpx.TimeoutException:
            pass  # the point: the client gives up and closes the connection

    t = threading.Thread(target=call)
    t.start()
    t.join()
    wait_until(
        lambda: _generation_stopped(stack), "the simulator to stop generating", timeout=1.0, interval=0.02
    )
    # 0.5 s of 50 ms steps made ~10 tokens of a 2000-token answer before the engine stopped.
    assert 0 < _generated(stack) - before < 100
    text = httpx.get(f"{stack.gateway}/metrics", timeout=5).text
    assert "llmgw_client_disconnects_total" in text
