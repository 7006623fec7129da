"""One HTTP exchange on the bare-ASGI hot path: ASGI types, request ids, the request headers the
relay reads, the disconnect watcher, and the OpenAI-shaped error response.

The watcher exists because uvicorn's `send` silently drops writes after a client disconnect: waiting
on the receive channel for `http.disconnect` is the only reliable signal for a non-streamed request.
It starts `WATCH_AFTER_S` into the pool call, not at once: the watcher is a task (created, run,
cancelled and run again to unwind: ~4 % of the relay's CPU per request when every request had one),
and a call that answers within that time has nothing worth cancelling. A client that left earlier is
still noticed when the watcher starts (the receive channel then says `http.disconnect` at once).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.dialects.exchange import DialectSend

# How long a pool call runs before the relay watches for the client leaving. Short against any LLM
# generation (what cancelling saves), long against a fast answer (which then costs no task).
WATCH_AFTER_S = 0.02

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Response heads the relay and the cascade runner send (a stream's: no caching, no proxy buffering).
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies in front of us not to buffer the stream
]

_REQUEST_ID_OK = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")


class Kind(StrEnum):
    """Which endpoint a request came in on (the edge decides it from the path). The last two are
    dialects (gateway.dialects): asked of a pool as chat."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    RESPONSES = "responses"
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"  # Messages' token counting: nothing is generated
    INPUT_TOKENS = "input_tokens"  # Responses' token counting: nothing is generated

    @property
    def asked(self) -> Kind:
        """The endpoint a request of this kind is asked of a pool as (a dialect's: chat)."""
        return self if self in _OPENAI else Kind.CHAT


_OPENAI = frozenset({Kind.CHAT, Kind.COMPLETIONS, Kind.EMBEDDINGS})


class ClientGone(Exception):
    """The client disconnected; nothing can be sent any more."""


class RequestIds:
    """Request ids unique across processes: a random per-process prefix plus a counter.

    Profiling showed `os.urandom` + hex per request at ~5 % of the relay's CPU; a counter costs
    nothing and the 64-bit random prefix keeps ids from different replicas apart.
    """

    __slots__ = ("_prefix", "_counter")

    def __init__(self) -> None:
        self._prefix = b"req_" + os.urandom(8).hex().encode()
        self._counter = itertools.count(1)

    def of(self, scope: Scope) -> bytes:
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                return self.accept(value)
        return self.new()

    def accept(self, client_id: bytes | None) -> bytes:
        """The client's id when it is a sane one, else a new id."""
        if client_id is not None and _REQUEST_ID_OK.match(client_id):
            return bytes(client_id)
        return self.new()

    def new(self) -> bytes:
        return b"%s%08x" % (self._prefix, next(self._counter))


async def send_error(send: Send, err: GatewayError, request_id: bytes) -> None:
    body = err.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id),
    ]
    headers += [(k.encode(), v.encode()) for k, v in err.response_headers().items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class Exchange:
    """One request's HTTP facts: its id, the endpoint it came in on and the one asked of the pool, its
    headers and the `send` its answers go through, arrival, status, whether the answer is a stream,
    end-to-end time, and the disconnect watcher. What the relay's stages decide lives in the parts of
    `gateway.record.RequestRecord`, which holds this exchange."""

    __slots__ = (
        "rid", "endpoint", "kind", "headers", "reply", "t0", "task", "status", "stream", "e2e",
        "finished", "client_gone", "watching",
    )  # fmt: skip

    def __init__(
        self,
        rid: bytes,
        kind: Kind,
        headers: RequestHeaders,
        t0: float,
        reply: DialectSend | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.rid = rid
        self.endpoint = kind  # the endpoint the client called: labels metrics, logs and traces
        self.kind = kind  # the endpoint asked of the pool (read: a dialect's request is asked as chat)
        self.headers = headers
        self.reply = reply  # a dialect's request: the `send` that translates its answers
        self.t0 = t0  # arrival (perf_counter)
        # With the loop given, no asyncio.get_running_loop(): a getpid() system call on Python 3.11.
        self.task = asyncio.current_task(loop)
        self.status = 500
        self.stream = False  # the answer is an SSE stream (normalize, or the cache's replay)
        self.e2e = 0.0  # arrival -> last byte, seconds (set when the request ends)
        self.finished = False  # `done`: nothing more is sent, nothing is watched
        self.client_gone = False
        # The watcher: its timer until `WATCH_AFTER_S`, then the receive call it waits on.
        self.watching: asyncio.TimerHandle | asyncio.Future[Message] | None = None

    def watch(self, receive: Receive, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Watch for the client leaving from `WATCH_AFTER_S` on, until `done` (`loop`: the running one,
        when the caller has it at hand)."""
        loop = loop or asyncio.get_running_loop()
        self.watching = loop.call_later(WATCH_AFTER_S, self._start_watch, receive)

    def _start_watch(self, receive: Receive) -> None:
        if self.finished:
            self.watching = None
            return
        watcher = self.watching = asyncio.ensure_future(receive())
        watcher.add_done_callback(self._on_receive)

    def _on_receive(self, fut: asyncio.Future[Message]) -> None:
        if fut.cancelled() or self.finished:
            return
        if fut.exception() is None and fut.result().get("type") == "http.disconnect":
            self.client_gone = True
            if self.task is not None:
                self.task.cancel()

    def done(self) -> None:
        """Nothing more is sent: the watcher (its timer, or the receive call it waits on) is stopped."""
        self.finished = True
        watching = self.watching
        if watching is not None:
            watching.cancel()  # a timer's, or a pending receive's (a no-op once it completed)
            self.watching = None


class RequestHeaders:
    """The request headers the relay reads, found in one pass."""

    __slots__ = (
        "request_id", "content_length", "authorization", "api_key", "latency_budget", "risk", "cache", "tags",
    )  # fmt: skip

    def __init__(self, scope: Scope) -> None:
        self.request_id: bytes | None = None
        self.content_length: bytes | None = None
        self.authorization: bytes | None = None
        self.api_key: bytes | None = None
        self.latency_budget: bytes | None = None  # routed aliases: x-llmgw-latency-budget-ms
        self.risk: bytes | None = None  # routed aliases: x-llmgw-risk (comma-separated flags)
        self.cache: bytes | None = None  # x-llmgw-cache: on | off (gateway.relay.response_cache)
        self.tags: bytes | None = None  # x-llmgw-tags: comma-separated (gateway.budget.labels)
        for name, value in scope["headers"]:
            if name == b"authorization":
                self.authorization = value
            elif name == b"content-length":
                self.content_length = value
            elif name == b"x-request-id":
                self.request_id = value
            elif name == b"api-key" or name == b"x-api-key":  # Azure's, Anthropic's
                self.api_key = value
            elif name == b"x-llmgw-latency-budget-ms":
                self.latency_budget = value
            elif name == b"x-llmgw-risk":
                self.risk = value
            elif name == b"x-llmgw-cache":
                self.cache = value
            elif name == b"x-llmgw-tags":
                self.tags = value
