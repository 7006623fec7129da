"""A pool with `engine: litellm` is served in-process (gateway.upstream.hosted): LiteLLM's async API is
called in the gateway's event loop, with no loopback HTTP server and no HTTP hop of its own.

The provider is LiteLLM's mock (`mock_response`, passed in the request body like any provider
field), so nothing should touch the network at all: the whole gateway runs in this process over ASGI
while every socket bind, listen and connect raises. The loopback bridge this replaced listened on
127.0.0.1 and was called over HTTP for every request; here either would fail the test."""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.config import Policy
from gateway.settings import Settings
from gateway.upstream.hosted import LiteLLMTransport
from gateway.upstream.transport import Request

# Imported here before the transport sets it: LiteLLM must not try to fetch its price map either way.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("litellm")

POOL = {
    "name": "hosted",
    "engine": "litellm",
    "model": "openai/frontier",
    "endpoints": {"static": ["http://provider.invalid/v1"]},
    "timeouts": {"connect_s": 1, "first_token_s": 5, "total_s": 10},
}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every socket bind, listen and connect fails (and is recorded)."""
    tried: list[str] = []

    def refuse(what: str) -> Any:
        def call(self: socket.socket, *args: Any) -> Any:
            tried.append(f"{what}{args}")
            raise OSError(f"no network in this test: {what}{args}")

        return call

    for what in ("bind", "listen", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, what, refuse(what))
    yield tried


@pytest.fixture(autouse=True)
def _gc_as_it_was() -> Iterator[None]:
    thresholds = gc.get_threshold()  # the app's lifespan tunes the GC for a serving process
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.fixture
async def gateway(no_network: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    policy = Policy.model_validate(
        {
            "pools": [POOL],
            "models": [{"name": "frontier", "route": {"pool": "hosted"}, "max_tokens": {"default": 16}}],
            "tenancy": {"auth": "disabled"},
        }
    )
    app = GatewayApp(policy, Settings())
    async with app.lifespan(app.api):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as client:
            yield client
    assert no_network == []  # nothing tried a socket: no bridge listened, no call left the process


def _chat(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "frontier",
        "messages": [{"role": "user", "content": "Say hello."}],
        "mock_response": "Hello from the mock provider",
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def test_a_unary_answer_comes_from_litellm_in_process(gateway: httpx.AsyncClient) -> None:
    r = await gateway.post("/v1/chat/completions", json=_chat(False))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["content"] == "Hello from the mock provider"
    assert data["usage"]["completion_tokens"] > 0


async def test_a_stream_comes_from_litellm_in_process(gateway: httpx.AsyncClient) -> None:
    r = await gateway.post("/v1/chat/completions", json=_chat(True))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.content.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [orjson.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text == "Hello from the mock provider"


async def test_the_pools_config_wins_over_the_body(no_network: list[str]) -> None:
    """A client's body cannot point the pool's key at a server of its choosing."""
    from gateway.config_pool import Pool

    seen: dict[str, Any] = {}
    transport = LiteLLMTransport([Pool.model_validate(POOL)])

    async def acompletion(**kwargs: Any) -> Any:
        seen.update(kwargs)
        raise RuntimeError("stop here")

    transport._litellm = SimpleNamespace(
        acompletion=acompletion, atext_completion=acompletion, aembedding=acompletion
    )
    body = orjson.dumps(
        {
            "messages": [],
            "api_base": "http://attacker.example",
            "base_url": "http://attacker.example",
            "api_key": "mine",
            "litellm_params": {},
            "temperature": 0.5,
        }
    )
    headers = {"authorization": "Bearer sk-pool"}
    reply = await transport.handle(
        Request("POST", "litellm://hosted/0", "/v1/chat/completions", headers, body, connect_s=1, total_s=5)
    )
    assert reply.status == 502  # the provider's failure, as an OpenAI error body
    assert seen["api_base"] == "http://provider.invalid/v1" and seen["api_key"] == "sk-pool"
    assert "base_url" not in seen and "litellm_params" not in seen and seen["temperature"] == 0.5
    assert seen["model"] == "openai/frontier"
