"""Static upstream: the fastest answer we can give from Python, to lift the upstream cap off the
throughput figure. vLLM-shaped: a role chunk, one chunk per token (the last has finish_reason), the
usage chunk when asked, [DONE]. Events are written one per loop iteration, as a token-by-token server
would, so that the gateway's per-chunk path is exercised rather than one coalesced read.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
from collections.abc import Sequence
from typing import Any, cast

from eval.bench.overhead.client import MODEL, STREAM_TOKENS


def _canned() -> tuple[bytes, list[bytes], bytes]:
    usage = {"prompt_tokens": 12, "completion_tokens": STREAM_TOKENS, "total_tokens": 12 + STREAM_TOKENS}
    words = [f" w{i}" for i in range(STREAM_TOKENS)]
    full = {
        "id": "chatcmpl-static",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(words), "tool_calls": []},
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": usage,
    }
    head = {"id": "chatcmpl-static", "object": "chat.completion.chunk", "created": 1, "model": MODEL}

    def ev(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({**head, **obj}, separators=(",", ":")).encode() + b"\n\n"

    events = [ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    for i, w in enumerate(words):
        fin = "length" if i == len(words) - 1 else None
        events.append(ev({"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": fin}]}))
    return json.dumps(full, separators=(",", ":")).encode(), events, ev({"choices": [], "usage": usage})


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _StaticServer(asyncio.Protocol):
    def __init__(self, full: bytes, events: Sequence[bytes], usage_event: bytes) -> None:
        self._unary = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(full)
        ) + full
        self._sse_head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        self._events = [_chunk(e) for e in events]
        self._usage = _chunk(usage_event)
        self._tail = _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self._health = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False  # a stream is being written; later pipelined requests wait their turn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._serve()

    def _serve(self) -> None:
        t = self._transport
        while t is not None and not self._busy and not t.is_closing():
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end]).lower()
            m = re.search(rb"\r\ncontent-length:\s*(\d+)", head)
            length = int(m.group(1)) if m else 0
            if len(self._buf) < end + 4 + length:
                return
            body = bytes(self._buf[end + 4 : end + 4 + length])
            del self._buf[: end + 4 + length]
            if not head.startswith(b"post"):
                t.write(self._health)
            elif b'"stream":true' in body:
                parts = [self._sse_head + self._events[0], *self._events[1:]]
                if b'"include_usage":true' in body:
                    parts.append(self._usage)
                parts.append(self._tail)
                self._busy = True
                self._write_parts(parts, 0)
            else:
                t.write(self._unary)

    def _write_parts(self, parts: list[bytes], i: int) -> None:
        t = self._transport
        if t is None or t.is_closing():
            return
        t.write(parts[i])
        if i + 1 < len(parts):
            asyncio.get_running_loop().call_soon(self._write_parts, parts, i + 1)
        else:
            self._busy = False
            self._serve()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None


async def serve_static(port: int) -> None:
    full, events, usage_event = _canned()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _StaticServer(full, events, usage_event), "127.0.0.1", port, backlog=1024, reuse_address=True
    )
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()
