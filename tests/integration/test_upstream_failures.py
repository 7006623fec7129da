"""Each upstream failure maps to the right status and OpenAI error body (real gateway process)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import fake_upstream
from tests.support.procs import free_port
from tests.support.stack import Stack

MODES = [
    "ok",
    "s500",
    "s400",
    "s401",
    "s404",
    "s429",
    "s503",
    "html500",
    "malformed",
    "slow",
    "hang_stream",
    "drop_stream",
    "no_done",
]


# Both upstream clients: the lean one (plain-HTTP replicas, the default) and aiohttp (TLS replicas,
# or LLMGW_UPSTREAM_CLIENT=aiohttp) must map every failure the same way.
@pytest.fixture(scope="module", params=["h1", "aiohttp"])
def gateway(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[str, list[Any]]]:
    up_port, gw_port, dead_port = free_port(), free_port(), free_port()
    tmp = tmp_path_factory.mktemp("failures")
    pools = {m: f"http://127.0.0.1:{up_port}/{m}" for m in MODES}
    pools["refused"] = f"http://127.0.0.1:{dead_port}"
    lines = ["pools:"]
    for name, url in pools.items():
        pool_name = name.replace("_", "-")
        lines += [
            f"  - name: {pool_name}",
            "    model: m",
            f'    endpoints: {{static: ["{url}"]}}',
            "    timeouts: {connect_s: 1, first_token_s: 1, total_s: 2}",
        ]
    lines.append("models:")
    for name in pools:
        pool_name = name.replace("_", "-")
        lines.append(f"  - {{name: {name}, route: {{pool: {pool_name}}}}}")
    cfg = tmp / "policy.yaml"
    cfg.write_text("\n".join(lines) + "\ntenancy: {auth: disabled}\n")
    with fake_upstream(up_port) as seen, Stack(tmp) as s:
        yield s.gateway(cfg, port=gw_port, env={"LLMGW_UPSTREAM_CLIENT": request.param}).url, seen


def _chat(base: str, alias: str, stream: bool = False) -> httpx.Response:
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=15)


def _assert_error_shape(resp: httpx.Response) -> dict[str, Any]:
    data = resp.json()
    assert set(data) == {"error"}
    err = data["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)
    assert err["code"] is None or isinstance(err["code"], str)
    assert resp.headers["x-request-id"]
    return dict(err)


@pytest.mark.parametrize(
    ("alias", "status", "type_", "code", "message_has"),
    [
        ("s500", 502, "api_error", "upstream_error", "failed with HTTP 500"),
        ("html500", 502, "api_error", "upstream_error", "HTTP 500"),
        ("s400", 400, "invalid_request_error", "context_length_exceeded", "context length"),
        ("s401", 502, "api_error", "upstream_error", "credentials"),
        ("s404", 502, "api_error", "upstream_error", "does not serve"),
        ("s429", 429, "rate_limit_error", "rate_limit_exceeded", "rate limiting"),
        ("s503", 503, "api_error", "upstream_unavailable", "unavailable"),
        ("malformed", 502, "api_error", "upstream_error", "malformed"),
        ("slow", 504, "api_error", "upstream_timeout", "in time"),
        ("refused", 503, "api_error", "upstream_unavailable", "unreachable"),
    ],
)
def test_upstream_failure_maps_to_openai_error(
    gateway: tuple[str, list[Any]], alias: str, status: int, type_: str, code: str | None, message_has: str
) -> None:
    base, _ = gateway
    resp = _chat(base, alias)
    assert resp.status_code == status, resp.text
    err = _assert_error_shape(resp)
    assert err["type"] == type_
    assert err["code"] == code
    assert message_has in err["message"]
    if status >= 500 or status == 429:
        assert "retry-after" in resp.headers
    if alias == "s429":
        assert resp.headers["retry-after"] == "7"


def test_first_token_timeout_is_504_before_any_byte(gateway: tuple[str, list[Any]]) -> None:
    base, _ = gateway
    resp = _chat(base, "hang_stream", stream=True)
    assert resp.status_code == 504
    assert _assert_error_shape(resp)["code"] == "upstream_timeout"


@pytest.mark.parametrize("alias", ["drop_stream", "no_done"])
def test_stream_broken_midway_ends_with_error_event_and_done(
    gateway: tuple[str, list[Any]], alias: str
) -> None:
    base, _ = gateway
    resp = _chat(base, alias, stream=True)
    assert resp.status_code == 200
    events = [e for e in resp.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert events[-2].startswith('data: {"error"')
    assert '"type":"api_error"' in events[-2]
    assert sum('"content":"a"' in e for e in events) == 2


def test_client_authorization_never_reaches_the_pool(gateway: tuple[str, list[Any]]) -> None:
    base, seen = gateway
    body = {"model": "ok", "messages": [{"role": "user", "content": "hi"}]}
    resp = httpx.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-client-secret"},
        timeout=10,
    )
    assert resp.status_code == 200
    mode, headers, _ = seen[-1]
    assert mode == "ok"
    headers = {k.lower(): v for k, v in headers.items()}
    assert "sk-client-secret" not in str(headers)
    assert headers.get("x-request-id") == resp.headers["x-request-id"]


def test_unknown_fields_reach_the_pool_unchanged_and_output_tokens_are_capped(
    gateway: tuple[str, list[Any]],
) -> None:
    base, seen = gateway
    extra = {
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object", "properties": {}}},
            }
        ],
        "tool_choice": "auto",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        },
        "logprobs": True,
        "top_logprobs": 3,
        "n": 2,
        "seed": 42,
        "user": "end-user-7",
        "vendor_extension": {"nested": [1, 2, 3]},
    }
    body = {
        "model": "ok",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 10**9,
        **extra,
    }
    assert httpx.post(f"{base}/v1/chat/completions", json=body, timeout=10).status_code == 200
    mode, _, raw = seen[-1]
    sent = json.loads(raw)
    assert mode == "ok"
    for key, value in extra.items():
        assert sent[key] == value, key
    assert sent["model"] == "m"  # the pool's model, not the alias
    assert sent["max_completion_tokens"] == 4096  # the alias's default cap
    assert "max_tokens" not in sent
