"""A dialect's request on the relay: its ASGI `send`, which turns the relay's chat answers into the
dialect's.

The relay answers a dialect's request exactly as a chat request: a JSON chat.completion, an SSE
stream of chat.completion.chunk events ending with `[DONE]`, or the gateway's OpenAI-shaped error
(before the response started: a JSON body with the error status; after it: an error event). This
`send` sits between the relay and the client and rewrites each of them with the dialect (pure
functions, gateway.dialects.*); everything else the relay does (the cache storing the chat bytes,
settlement from the chat usage, the response's headers) is unchanged. A unary answer's head waits
for its body (its content-length changes).

A stream's events are not split here: the relay's splitter already found them (gateway.sse
`KeepingSplitter`) and hands their data over with the bytes, as the body message's `"events"`. Bytes
without it (a cached answer replayed, the json_schema policy's replay, a tail the gateway wrote)
are split by gateway.sse, the one SSE reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from gateway.dialects import Dialect, StreamTranslator
from gateway.edge.exchange import Message, Send
from gateway.sse import complete_events, data_of

__all__ = ["DialectSend"]

_DONE = b"[DONE]"


class DialectSend:
    """The `send` of one request in `dialect`; `request` is set once the client's body is parsed (an
    answer before that can only be an error, which needs none)."""

    __slots__ = (
        "_send", "_dialect", "to_chat", "request", "headers", "_head", "_body", "_stream", "_carry",
        "_ended",
    )  # fmt: skip

    def __init__(
        self, send: Send, dialect: Dialect, to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        self._send = send
        self._dialect = dialect
        self.to_chat = to_chat  # the client's body as a chat request (the dialect's, or count_tokens')
        self.request: dict[str, Any] = {}
        self.headers: list[tuple[bytes, bytes]] = []  # added to the answer's (what the translation dropped)
        self._head: Message | None = None  # a unary answer's head, held until its body
        self._body: list[bytes] = []
        self._stream: StreamTranslator | None = None
        self._carry = b""  # bytes of an unfinished event (the gateway sends whole ones; defensive)
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
            events = message.get("events")
            if events is None:  # bytes the gateway wrote (a replay, a tail): read by gateway.sse
                events = self._split(body) if body else ()
            out = self._translate(events)
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
            if self.headers:
                message = {**message, "headers": [*headers, *self.headers]}
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
        headers += self.headers
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    def _split(self, data: bytes) -> list[bytes]:
        """The data of the whole events in bytes the relay did not split (a partial one waits)."""
        events, self._carry = complete_events(self._carry + data if self._carry else data)
        out: list[bytes] = []
        for event in events:
            payload = data_of(event)
            if payload is not None:
                out.append(payload)
        return out

    def _translate(self, payloads: Iterable[bytes]) -> bytes:
        """The dialect's events for the chat events whose data are `payloads`."""
        stream = self._stream
        assert stream is not None
        out: list[bytes] = []
        for payload in payloads:
            if self._ended:
                break
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
