"""A dialect's request on the relay: its ASGI `send`, which turns the relay's chat answers into the
dialect's.

The relay answers a dialect's request exactly as a chat request: a JSON chat.completion, an SSE
stream of chat.completion.chunk events ending with `[DONE]`, or the gateway's OpenAI-shaped error
(before the response started: a JSON body with the error status; after it: an error event). This
`send` sits between the relay and the client and rewrites each of them with the dialect (pure
functions, gateway.dialects.*); everything else the relay does (the cache storing the chat bytes,
settlement from the chat usage, the response's headers) is unchanged. A unary answer's head waits
for its body (its content-length changes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.dialects import Dialect, StreamTranslator
from gateway.edge.exchange import Message, Send
from gateway.upstream.sse import data_of

__all__ = ["DialectSend"]

_DONE = b"[DONE]"


class DialectSend:
    """The `send` of one request in `dialect`; `request` is set once the client's body is parsed (an
    answer before that can only be an error, which needs none)."""

    __slots__ = (
        "_send", "_dialect", "to_chat", "request", "_head", "_body", "_stream", "_carry", "_ended",
    )  # fmt: skip

    def __init__(
        self, send: Send, dialect: Dialect, to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        self._send = send
        self._dialect = dialect
        self.to_chat = to_chat  # the client's body as a chat request (the dialect's, or count_tokens')
        self.request: dict[str, Any] = {}
        self._head: Message | None = None  # a unary answer's head, held until its body
        self._body: list[bytes] = []
        self._stream: StreamTranslator | None = None
        self._carry = b""  # an event split across two sends (the relay sends whole ones; defensive)
        self._ended = False  # the stream's last event was sent (an error ends it before [DONE])

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    @property
    def raw(self) -> Send:
        """The client's own `send`, for an answer that is already in the dialect."""
        return self._send

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            await self._start(message)
            return
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        body: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        if self._stream is not None:
            out = self._events(body)
            if out or not more:
                await self._send({"type": "http.response.body", "body": out, "more_body": more})
            return
        self._body.append(body)
        if not more:
            await self._unary()

    async def _start(self, message: Message) -> None:
        if self._stream is not None:  # as uvicorn says it: a stream's head went out already
            raise RuntimeError("the response already started")
        status = message["status"]
        headers = message.get("headers", [])
        sse = any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)
        if status == 200 and sse:
            self._stream = self._dialect.stream(self.request)
            await self._send(message)
        else:
            self._head = message

    async def _unary(self) -> None:
        head = self._head
        assert head is not None
        data = b"".join(self._body)
        status = head["status"]
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            if status == 200:
                out = self._dialect.from_chat(parsed, self.request)
            else:
                err = parsed.get("error")
                out = self._dialect.error(status, err if isinstance(err, dict) else {"message": str(err)})
            data = orjson.dumps(out)
        headers = [(k, v) for k, v in head.get("headers", []) if k != b"content-length"]
        headers.append((b"content-length", str(len(data)).encode()))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    def _events(self, data: bytes) -> bytes:
        """The dialect's events for the chat events in `data` (whole events; a partial one waits)."""
        stream = self._stream
        assert stream is not None
        if self._carry:
            data = self._carry + data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = data.rfind(b"\n\n")
        if end == -1:
            self._carry = data
            return b""
        self._carry = data[end + 2 :]
        out: list[bytes] = []
        for event in data[:end].split(b"\n\n"):
            payload = data_of(event)
            if payload is None or self._ended:
                continue
            if payload == _DONE:
                out.append(stream.close())
                self._ended = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue  # not JSON: the relay's splitter already judged the stream; nothing to say
            if not isinstance(chunk, dict):
                continue
            err = chunk.get("error")
            if isinstance(err, dict):
                out.append(stream.fail(err))
                self._ended = True
            else:
                out.append(stream.feed(chunk))
        return b"".join(out)
