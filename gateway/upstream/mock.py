"""`MockTransport`: a transport whose replies come from a function, for tests (httpx's MockTransport).

    async def pool(request: Request) -> MockReply:
        if request.stream:
            return MockReply(200, [b"data: {...}\\n\\n", b"data: [DONE]\\n\\n"], sse=True)
        return MockReply(200, b'{"choices": [...]}')

    calls = PoolCalls(Transports(MockTransport(pool)), metrics)

The handler may be sync or async and may raise a transport error (gateway.errors: `ConnectFailed`,
`TransportTimeout`, ...) to fail the exchange before any reply. A body is bytes, or an iterable or
async iterable of chunks, each returned by one `readany`; an exception among the chunks (or raised
by an async generator) is raised by the read that reaches it: a stream broken mid-way. Every request
and reply is kept (`requests`, `replies`) so a test can see what was sent and how each reply ended.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator

import orjson

from gateway.upstream.transport import Request

__all__ = ["MockReply", "MockTransport"]

Chunks = Iterable[bytes | BaseException] | AsyncIterable[bytes]
Handler = Callable[[Request], "MockReply | Awaitable[MockReply]"]


class MockReply:
    """A reply: `status`, headers, and `body` as bytes or chunks; `json` instead of `body` for a JSON
    object, `sse=True` for a `text/event-stream` content type. `ended` is None while it is open,
    then "released" or "closed"."""

    def __init__(
        self,
        status: int = 200,
        body: bytes | Chunks = b"",
        headers: dict[str, str] | None = None,
        *,
        json: object = None,
        sse: bool = False,
    ) -> None:
        self.status = status
        self.headers = {k.lower().encode("latin-1"): v for k, v in (headers or {}).items()}
        if json is not None:
            body = orjson.dumps(json)
            self.headers.setdefault(b"content-type", "application/json")
        if sse:
            self.headers.setdefault(b"content-type", "text/event-stream")
        self._chunks: Iterator[bytes | BaseException] | AsyncIterator[bytes]
        if isinstance(body, bytes):
            self._chunks = iter((body,) if body else ())
        elif isinstance(body, AsyncIterable):
            self._chunks = aiter(body)
        else:
            self._chunks = iter(body)
        self.ended: str | None = None

    def header(self, name: bytes) -> str | None:
        return self.headers.get(name)

    async def readany(self) -> bytes:
        if self.ended is not None:
            return b""
        chunks = self._chunks
        if isinstance(chunks, AsyncIterator):
            try:
                return await anext(chunks)
            except StopAsyncIteration:
                return b""
        item = next(chunks, b"")
        if isinstance(item, BaseException):
            raise item
        return item

    async def read(self) -> bytes:
        out = b""
        while chunk := await self.readany():
            out += chunk
        return out

    def release(self) -> None:
        self.ended = self.ended or "released"

    def close(self) -> None:
        self.ended = self.ended or "closed"


class MockTransport:
    """A transport answering each request with `handler(request)`."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[Request] = []
        self.replies: list[MockReply] = []

    async def handle(self, request: Request) -> MockReply:
        self.requests.append(request)
        reply = self._handler(request)
        if inspect.isawaitable(reply):
            reply = await reply
        assert isinstance(reply, MockReply), f"the mock's handler answered {reply!r}"
        self.replies.append(reply)
        return reply
