"""The relay against pools played by a `MockTransport` (gateway.upstream.mock): a whole gateway in this
process, driven over ASGI, whose every replica is a function from request to reply. No sockets, no
byte-level servers: what is checked is what the relay does with what a pool answers (relayed bytes,
retries before the first byte, timeouts, a stream broken mid-way, how each reply was ended)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.config import Policy
from gateway.errors import ConnectFailed, Disconnected, TransportTimeout
from gateway.settings import Settings
from gateway.upstream.mock import MockReply, MockTransport
from gateway.upstream.transport import Request
from tests.support.fake_upstream import OK_BODY

A, B = "http://a.test:8000", "http://b.test:8000"
CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
ANSWER = OK_BODY
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def token(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
    return event({**CHUNK, "choices": [choice]})


STREAM = [
    token("he"),
    token("llo", "stop"),
    event({**CHUNK, "choices": [], "usage": USAGE}),
    b"data: [DONE]\n\n",
]


def policy(first_token_s: float = 2.0) -> Policy:
    return Policy.model_validate(
        {
            "pools": [
                {
                    "name": "small",
                    "engine": "openai",
                    "model": "m",
                    "endpoints": {"static": [A, B]},
                    "balancing": {"strategy": "round_robin"},
                    "timeouts": {"connect_s": 1, "first_token_s": first_token_s, "total_s": 5},
                }
            ],
            "models": [
                {"name": "small", "route": {"pool": "small"}, "max_tokens": {"default": 16, "cap": 64}}
            ],
            "tenancy": {"auth": "disabled"},
        }
    )


@pytest.fixture(autouse=True)
def _gc_as_it_was() -> Iterator[None]:
    """The app's lifespan freezes the GC and sets its thresholds (a serving process's tuning)."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@asynccontextmanager
async def gateway(
    handler: Callable[[Request], Any], first_token_s: float = 2.0
) -> AsyncIterator[tuple[httpx.AsyncClient, MockTransport]]:
    mock = MockTransport(handler)
    app = GatewayApp(policy(first_token_s), Settings(), transport=mock)
    async with app.lifespan(app.api):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=10) as client:
            yield client, mock


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "small", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}


async def test_a_unary_answer_is_relayed_byte_for_byte() -> None:
    answer = orjson.dumps(ANSWER, option=orjson.OPT_INDENT_2)  # the pool's own formatting survives

    async with gateway(lambda req: MockReply(200, answer, {"content-type": "application/json"})) as (
        gw,
        mock,
    ):
        r = await gw.post("/v1/chat/completions", json=chat())
    assert r.status_code == 200 and r.content == answer
    (sent,) = mock.requests
    assert sent.method == "POST" and sent.path == "/v1/chat/completions" and not sent.stream
    assert orjson.loads(sent.body)["model"] == "m"  # the alias rewritten to the pool's model
    assert mock.replies[0].ended == "released"


async def test_a_stream_is_relayed_event_by_event_and_its_connection_reused() -> None:
    # The pool's reads do not line up with its events: one arrives cut in two.
    body = b"".join(STREAM)
    cut = body.index(b"llo")
    pieces = [body[:cut], body[cut:]]

    async with gateway(lambda req: MockReply(200, pieces, sse=True)) as (gw, mock):
        r = await gw.post("/v1/chat/completions", json=chat(True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    # The usage chunk the client did not ask for is cut; the rest is the pool's bytes.
    assert r.content == STREAM[0] + STREAM[1] + STREAM[3]
    assert mock.requests[0].stream and mock.replies[0].ended == "released"


async def test_a_5xx_before_the_first_byte_is_retried_on_another_replica() -> None:
    def pool(req: Request) -> MockReply:
        if req.base == A:
            return MockReply(503, json={"error": {"message": "engine overloaded at 10.0.0.7"}})
        return MockReply(200, STREAM, sse=True)

    async with gateway(pool) as (gw, mock):
        for _ in range(2):  # round robin: one of the two starts on A
            r = await gw.post("/v1/chat/completions", json=chat(True))
            assert r.status_code == 200 and r.content.endswith(b"data: [DONE]\n\n")
    bases = [req.base for req in mock.requests]
    assert A in bases and bases.count(B) == 2  # each request answered by B...
    assert all(bases[i + 1] == B for i, base in enumerate(bases) if base == A)  # ...A's retried there


async def test_a_connect_failure_is_retried_on_another_replica() -> None:
    def pool(req: Request) -> MockReply:
        if req.base == A:
            raise ConnectFailed("cannot connect to a.test:8000: refused")
        return MockReply(200, json=ANSWER)

    async with gateway(pool) as (gw, mock):
        for _ in range(2):
            r = await gw.post("/v1/chat/completions", json=chat())
            assert r.status_code == 200
    assert [req.base for req in mock.requests].count(B) == 2


async def test_a_transport_timeout_is_a_504_and_not_retried() -> None:
    def pool(req: Request) -> MockReply:
        raise TransportTimeout("the upstream exchange exceeded its total timeout at 10.0.0.7:8000")

    async with gateway(pool) as (gw, mock):
        r = await gw.post("/v1/chat/completions", json=chat())
    assert r.status_code == 504
    err = r.json()["error"]
    assert err["code"] == "upstream_timeout" and "pool 'small'" in err["message"]
    assert "10.0.0.7" not in r.text
    assert len(mock.requests) == 1  # the client already waited one timeout: not another


async def test_no_first_token_in_time_is_a_504_and_the_connection_dropped() -> None:
    async def slow() -> AsyncIterator[bytes]:
        await asyncio.sleep(10)
        yield b""

    async with gateway(lambda req: MockReply(200, slow(), sse=True), first_token_s=0.2) as (gw, mock):
        r = await gw.post("/v1/chat/completions", json=chat(True))
    assert r.status_code == 504 and "sent no token within" in r.json()["error"]["message"]
    assert len(mock.requests) == 1 and mock.replies[0].ended == "closed"


async def test_a_disconnect_mid_stream_ends_it_with_an_error_event() -> None:
    broken = [STREAM[0], Disconnected("the connection to 10.0.0.7:8000 ended")]

    async with gateway(lambda req: MockReply(200, broken, sse=True)) as (gw, mock):
        r = await gw.post("/v1/chat/completions", json=chat(True))
    assert r.status_code == 200  # the head went out with the first event
    assert r.content.startswith(STREAM[0]) and r.content.endswith(b"data: [DONE]\n\n")
    events = [e for e in r.content.split(b"\n\n") if e]
    error = orjson.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == "upstream_error" and "closed the connection" in error["message"]
    assert "10.0.0.7" not in r.text
    assert mock.replies[0].ended == "closed"  # never reused: vLLM must see its reader leave


async def test_a_dialect_stream_is_translated_from_the_events_the_relay_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The relay's splitter hands the events to the dialect: splitting the relayed bytes again would
    # fail here.
    import gateway.dialects.exchange as exchange

    def no_second_split(data: bytes) -> tuple[list[bytes], bytes]:
        raise AssertionError("the dialect split the relayed bytes again")

    monkeypatch.setattr(exchange, "complete_events", no_second_split)
    body = {
        "model": "small",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with gateway(lambda req: MockReply(200, STREAM, sse=True)) as (gw, _):
        r = await gw.post("/v1/messages", json=body)
    assert r.status_code == 200
    kinds = [line.removeprefix(b"event: ") for line in r.content.split(b"\n") if line.startswith(b"event: ")]
    assert kinds[0] == b"message_start" and kinds[-1] == b"message_stop"
    deltas = [
        orjson.loads(line.removeprefix(b"data: "))
        for line in r.content.split(b"\n")
        if line.startswith(b"data: ") and b"content_block_delta" in line
    ]
    assert "".join(d["delta"]["text"] for d in deltas) == "hello"
