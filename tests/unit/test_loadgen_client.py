"""One timed request against an in-process aiohttp server: TTFT/TPOT/usage and every error kind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from eval.loadgen.client import Sample, execute, make_session
from eval.loadgen.plan import RequestSpec


def _spec(stream: bool, model: str) -> RequestSpec:
    return RequestSpec(0, 0, model, "t", "sk-1", stream, None, 4, None, b'{"model":"%s"}' % model.encode())


async def _handler(request: web.Request) -> web.StreamResponse:
    assert request.headers["authorization"] == "Bearer sk-1"
    model = (await request.json())["model"]
    if model == "429":
        return web.json_response({"error": {"message": "slow down"}}, status=429)
    if model == "unary":
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    if model == "slow":
        await asyncio.sleep(2)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    for piece in ("a", "b", "c", "d"):
        await asyncio.sleep(0.01)
        await resp.write(b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % piece.encode())
    if model == "error":
        await resp.write(b'data: {"error":{"message":"boom"}}\n\n')
    await resp.write(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n')
    if model != "truncated":
        await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture
async def url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1/chat/completions"
    await runner.cleanup()


async def _run(url: str, stream: bool, model: str, timeout: float = 10) -> Sample:
    async with make_session(4, timeout, 2) as session:
        t0 = time.perf_counter()
        return await execute(session, url, _spec(stream, model), t0, 0.0)


async def test_stream_times_and_usage(url: str) -> None:
    s = await _run(url, True, "ok")
    assert s.ok and s.error is None
    assert (s.prompt_tokens, s.completion_tokens, s.content_chunks) == (3, 4, 4)
    assert s.ttft is not None and s.first_token is not None and s.last_token is not None
    assert 0 < s.ttft <= s.e2e
    assert s.tpot == pytest.approx((s.last_token - s.first_token) / 3)


async def test_unary_has_usage_and_no_ttft(url: str) -> None:
    s = await _run(url, False, "unary")
    assert s.ok and s.completion_tokens == 4 and s.ttft is None and s.tpot is None


@pytest.mark.parametrize(
    ("model", "kind"), [("429", "http_429"), ("error", "stream_error"), ("truncated", "stream_truncated")]
)
async def test_error_kinds(url: str, model: str, kind: str) -> None:
    assert (await _run(url, True, model)).error == kind


async def test_timeout_and_connection_errors(url: str) -> None:
    assert (await _run(url, True, "slow", timeout=0.3)).error == "timeout"
    assert (await _run("http://127.0.0.1:9/v1/chat/completions", True, "ok")).error == "connection"
