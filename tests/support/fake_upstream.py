"""A misbehaving OpenAI-compatible upstream for failure tests (in-process aiohttp server in a thread).

Each behaviour lives under its own path prefix, so one server can back many pools:
`http://127.0.0.1:PORT/<mode>/v1/chat/completions`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
from aiohttp import web

from tests.support.thread_server import serve_in_thread

SEEN = web.AppKey("seen", list[tuple[str, dict[str, str], bytes]])

OK_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _vllm_error(status: int, message: str, type_: str) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": status}}
    return web.json_response(body, status=status)


async def _handle(request: web.Request) -> web.StreamResponse:
    mode = request.match_info["mode"]
    body = await request.read()
    request.app[SEEN].append((mode, dict(request.headers), body))
    if mode == "ok":
        return web.Response(body=orjson.dumps(OK_BODY), content_type="application/json")
    if mode == "s500":
        return _vllm_error(500, "engine crashed", "InternalServerError")
    if mode == "s400":
        return _vllm_error(400, "This model's maximum context length is 2048 tokens.", "BadRequestError")
    if mode == "s401":
        return web.json_response({"error": "Unauthorized"}, status=401)
    if mode == "s404":
        return _vllm_error(404, "The model `x` does not exist.", "NotFoundError")
    if mode == "s429":
        return web.json_response(
            {"error": {"message": "slow down"}}, status=429, headers={"retry-after": "7"}
        )
    if mode == "s503":
        return web.Response(text="<html>overloaded</html>", status=503, content_type="text/html")
    if mode == "html500":
        return web.Response(text="<html>bad gateway</html>", status=500, content_type="text/html")
    if mode == "malformed":
        return web.Response(body=b'{"id": "x", "choices": [', content_type="application/json")
    if mode == "slow":
        await asyncio.sleep(30)
        return web.Response(body=orjson.dumps(OK_BODY), content_type="application/json")
    if mode in ("hang_stream", "drop_stream", "no_done"):
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        if mode == "hang_stream":
            await asyncio.sleep(30)
        chunk = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        await resp.write(chunk)
        await resp.write(chunk)
        if mode == "drop_stream":
            assert request.transport is not None
            request.transport.abort()  # a replica dying mid-stream
            return resp
        await resp.write_eof()
        return resp
    return web.Response(status=418)


@contextmanager
def fake_upstream(port: int) -> Iterator[list[tuple[str, dict[str, str], bytes]]]:
    """Serve the fake on 127.0.0.1:port until the block ends; yields the list of requests seen."""
    seen: list[tuple[str, dict[str, str], bytes]] = []

    def build() -> web.Application:
        app = web.Application()
        app[SEEN] = seen
        app.router.add_post("/{mode}/v1/{tail:.*}", _handle)
        return app

    with serve_in_thread(port, build, "fake upstream"):
        yield seen
