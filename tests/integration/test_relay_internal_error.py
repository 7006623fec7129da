"""A bug of ours in the relay is answered in the shape of the API the request came in on, not with
uvicorn's plain-text `Internal Server Error`: the official SDKs parse it (status 500, type, code, the
request id), the failure is counted and logged, and the gateway goes on serving.

The bug is injected (a stage that raises what no stage should) into a gateway served in this process;
the pool is a real simulator, so a request without the fault is served end to end. A bug after a stream
started ends it with an error event (its head, 200, went out already)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvicorn

from gateway.app import GatewayApp
from gateway.config import load_policy
from gateway.relay._stream import StreamCall
from gateway.relay.pipeline import Relay
from gateway.settings import Settings
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port, wait_http
from tests.support.prom import metric
from tests.support.stack import Stack
from tests.support.thread_server import uvicorn_in_thread

FAULT = "trigger-the-injected-bug"  # fails before the response starts
MID_STREAM = "trigger-the-injected-bug-mid-stream"  # fails after a stream's head and first event


@dataclass
class Served:
    url: str
    key: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("bug")
    sim_port, gw_port = free_port(), free_port()
    key = generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: small, model: m, endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}}}
models:
  - {{name: small, route: {{pool: small}}, max_tokens: {{default: 4, cap: 8}}}}
tenancy:
  keys:
    - {{id: t, sha256: {hash_key(key)}, org: acme, app: web}}
"""
    )
    original, original_start = Relay._parsed, StreamCall._start

    def parsed(self: Relay, ctx: Any, raw: bytes) -> dict[str, Any]:
        if FAULT.encode() in raw and MID_STREAM.encode() not in raw:
            raise ZeroDivisionError("an injected bug")
        return original(self, ctx, raw)

    async def start(self: StreamCall, ctx: Any, *args: Any) -> float:
        t = await original_start(self, ctx, *args)
        if MID_STREAM in str(ctx.ask.body):
            raise ZeroDivisionError("an injected bug, mid-stream")
        return t

    patch = pytest.MonkeyPatch()
    patch.setattr(Relay, "_parsed", parsed)
    patch.setattr(StreamCall, "_start", start)
    app = GatewayApp(load_policy(str(policy)), Settings(port=gw_port))
    try:
        with Stack(tmp) as s:
            # Paced (not `instant`): a stream's first read is not the whole answer, so a bug can strike
            # between its first event and [DONE].
            s.sim("m", "--profile", "small", port=sim_port)
            s.enter(
                uvicorn_in_thread(uvicorn.Config(app, host="127.0.0.1", port=gw_port, log_level="warning"))
            )
            wait_http(f"http://127.0.0.1:{gw_port}/readyz")
            yield Served(f"http://127.0.0.1:{gw_port}", key)
    finally:
        patch.undo()


def _chat(served: Served, text: str, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0)
    return client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": text}], **extra
    )


def test_the_openai_sdk_reads_a_bug_as_an_internal_error(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="llmgw.relay"), pytest.raises(openai.InternalServerError) as e:
        _chat(served, FAULT)
    assert e.value.status_code == 500
    body = e.value.body
    assert isinstance(body, dict)
    assert body["type"] == "api_error" and body["code"] == "internal_error"
    assert "ZeroDivisionError" not in str(body)  # the traceback goes to the log, not to the caller
    rid = e.value.response.headers["x-request-id"]
    logged = [r for r in caplog.records if r.name == "llmgw.relay" and rid in r.getMessage()]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[0] is ZeroDivisionError
    # Streamed, it fails before the stream starts: the same JSON error, not a broken event stream.
    with pytest.raises(openai.InternalServerError):
        _chat(served, FAULT, stream=True)
    # The gateway goes on serving, and the failures are counted under their status.
    assert _chat(served, "hello").choices[0].message.content
    text = httpx.get(f"{served.url}/metrics", timeout=5).text
    assert metric(text, "llmgw_requests_total", 'code="500"') == 2


def test_the_anthropic_sdk_reads_a_bug_in_its_own_error_shape(served: Served) -> None:
    client = anthropic.Anthropic(base_url=served.url, api_key=served.key, max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as e:
        client.messages.create(model="small", max_tokens=4, messages=[{"role": "user", "content": FAULT}])
    assert e.value.status_code == 500
    body = e.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error"


def test_a_bug_after_a_stream_started_ends_it_with_an_error_event(served: Served) -> None:
    before = metric(httpx.get(f"{served.url}/metrics", timeout=5).text, "llmgw_requests_total", 'code="500"')
    stream = _chat(served, MID_STREAM, stream=True)
    with pytest.raises(openai.APIError) as e:
        for _ in stream:
            pass
    assert isinstance(e.value.body, dict) and e.value.body["code"] == "internal_error"
    raw = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "small", "messages": [{"role": "user", "content": MID_STREAM}], "stream": True},
        headers={"authorization": f"Bearer {served.key}"},
        timeout=10,
    )
    assert raw.status_code == 200  # the head went out before the bug
    assert raw.text.endswith("data: [DONE]\n\n") and '"code":"internal_error"' in raw.text
    # In Anthropic's shape on /v1/messages: its SDK reads the error event.
    client = anthropic.Anthropic(base_url=served.url, api_key=served.key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as a:
        with client.messages.stream(
            model="small", max_tokens=4, messages=[{"role": "user", "content": MID_STREAM}]
        ) as events:
            for _ in events:
                pass
    assert isinstance(a.value.body, dict) and a.value.body["error"]["type"] == "api_error"
    after = metric(httpx.get(f"{served.url}/metrics", timeout=5).text, "llmgw_requests_total", 'code="500"')
    assert after - before == 3
