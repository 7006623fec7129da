"""Incremental server-sent-events parsing for the load generator's streamed responses.

Bytes arrive in arbitrary pieces (a chunk can hold half an event or several); `SSEParser.feed` keeps
the incomplete tail and returns the `data:` payloads of every complete event, in order. Events end
at a blank line (`\\n\\n`, or `\\r\\n\\r\\n` from servers that use CRLF); fields other than `data`
(`event:`, `id:`, comments) are ignored, and the `data` lines of one event are joined with `\\n`
as the SSE spec says. `classify` then turns a payload into what the timing code needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


class SSEParser:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        out: list[bytes] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end == -1:
                break
            data = _event_data(buf[start:end])
            if data is not None:
                out.append(data)
            start = end + 2
        self._buf = buf[start:]
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not been terminated yet (a truncated stream leaves some)."""
        return self._buf


def _event_data(event: bytes) -> bytes | None:
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    # "data: x" and "data:x" are the same field; only one leading space is part of the syntax.
    parts = [line[6:] if line[5:6] == b" " else line[5:] for line in lines]
    return b"\n".join(parts)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One decoded stream payload: done marker, error event, content presence, usage."""

    done: bool = False
    error: str | None = None
    content: bool = False
    usage: dict[str, Any] | None = None
    invalid: bool = False


DONE = Chunk(done=True)


def classify(data: bytes) -> Chunk:
    if data == b"[DONE]":
        return DONE
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Chunk(invalid=True)
    if not isinstance(obj, dict):
        return Chunk(invalid=True)
    err = obj.get("error")
    if err is not None:
        message = err.get("message") if isinstance(err, dict) else err
        return Chunk(error=str(message))
    usage = obj.get("usage")
    return Chunk(content=_has_content(obj.get("choices")), usage=usage if isinstance(usage, dict) else None)


def _has_content(choices: Any) -> bool:
    """True when a chunk carries generated output (the first such chunk is TTFT).

    The role-only opening chunk of a chat stream (`delta: {"role": "assistant", "content": ""}`) and the
    usage-only final chunk (`choices: []`) carry none.
    """
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        ):
            return True
    return False
