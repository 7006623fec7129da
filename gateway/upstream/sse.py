"""Server-sent events from a pool, relayed as bytes.

The gateway never re-serializes content chunks: it splits the upstream byte stream at event
boundaries (`\\n\\n`), forwards complete events as they are, and looks inside only for the usage
object (to meter tokens) and for error events (to normalize them). The usage-only chunk
(`"choices":[]` plus a usage object) is cut out when the client did not ask for it. Scanning is a
couple of `bytes.find` calls per upstream read; JSON is parsed only for the usage and error events.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
_SEP = b"\n\n"


def error_event(body: bytes) -> bytes:
    """A stream's last words after it failed: an OpenAI error object as an event, then [DONE]."""
    return b"data: " + body + _SEP + DONE


def _non_null_usage_at(part: bytes, start: int = 0) -> int:
    """Index of a `"usage":{` (spaces allowed) in `part`, or -1. `"usage":null` does not count."""
    i = part.find(b'"usage"', start)
    while i != -1:
        j = i + 7
        n = len(part)
        while j < n and part[j] in b" :\t":
            j += 1
        if j < n and part[j] == 0x7B:  # "{"
            return i
        i = part.find(b'"usage"', j)
    return -1


def _event_bounds(part: bytes, at: int) -> tuple[int, int]:
    """The [start, end) of the event (including its separator) that contains byte `at`."""
    start = part.rfind(_SEP, 0, at)
    start = 0 if start == -1 else start + 2
    end = part.find(_SEP, at)
    end = len(part) if end == -1 else end + 2
    return start, end


def _event_json(event: bytes) -> dict[str, Any] | None:
    line = event.strip()
    if not line.startswith(b"data:"):
        return None
    try:
        data = orjson.loads(line[5:])
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


class SSESplitter:
    """Incremental splitter for one upstream stream."""

    __slots__ = ("_buf", "strip_usage", "strip_continuous", "usage", "saw_done", "error", "events", "meta")

    def __init__(self, strip_usage: bool, strip_continuous: bool = False) -> None:
        self._buf = b""
        self.strip_usage = strip_usage
        # The gateway asked for per-chunk usage (to meter a stream as it runs) that the client did not:
        # those chunks are the only ones ever re-serialized, without their usage member.
        self.strip_continuous = strip_continuous
        self.usage: dict[str, Any] | None = None
        self.saw_done = False
        self.error: dict[str, Any] | None = None  # an error event the pool sent mid-stream
        self.events = 0  # output events forwarded
        self.meta: dict[str, Any] | None = None  # id/object/created/model of a parsed chunk

    @property
    def produced(self) -> int:
        """Output tokens so far: the pool's cumulative usage when it reports one, else events seen."""
        usage = self.usage
        if usage is not None:
            ct = usage.get("completion_tokens")
            if isinstance(ct, int):
                return ct
        return self.events

    def length_tail(self, chat: bool, client_usage: bool, choices: int) -> bytes:
        """The end of a stream cut by the budget: a `finish_reason: "length"` chunk, usage, [DONE]."""
        meta = self.meta or {}
        head = {k: meta[k] for k in ("id", "object", "created", "model") if k in meta}
        out = b""
        for i in range(choices):
            choice: dict[str, Any] = (
                {"index": i, "delta": {}, "logprobs": None, "finish_reason": "length"}
                if chat
                else {"index": i, "text": "", "logprobs": None, "finish_reason": "length"}
            )
            out += b"data: " + orjson.dumps({**head, "choices": [choice]}) + _SEP
        if client_usage and self.usage is not None:
            out += b"data: " + orjson.dumps({**head, "choices": [], "usage": self.usage}) + _SEP
        return out + DONE

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Complete events to forward now, and whether any of them carried generated output."""
        buf = self._buf + data if self._buf else data
        cut = buf.rfind(_SEP)
        if cut == -1:
            self._buf = buf
            return b"", False
        body, self._buf = buf[: cut + 2], buf[cut + 2 :]
        done_here = body.endswith(DONE)
        if done_here:
            self.saw_done = True
            body = body[: -len(DONE)]
        at = _non_null_usage_at(body)
        while at != -1:
            s, e = _event_bounds(body, at)
            parsed = _event_json(body[s:e])
            if parsed is not None and isinstance(parsed.get("usage"), dict):
                self.usage = parsed.pop("usage")
                self.meta = parsed
                if parsed.get("choices") == []:
                    if self.strip_usage:
                        body = body[:s] + body[e:]
                        e = s
                elif self.strip_continuous:
                    event = b"data: " + orjson.dumps(parsed) + _SEP
                    body = body[:s] + event + body[e:]
                    e = s + len(event)
            at = _non_null_usage_at(body, e)
        if b'{"error"' in body:
            body = self._normalize_errors(body)
        has_output = bool(body)
        if has_output:
            self.events += body.count(_SEP)
        return (body + DONE if done_here else body), has_output

    def _normalize_errors(self, body: bytes) -> bytes:
        """Rewrite a pool's mid-stream error event (vLLM: integer code) into the OpenAI shape."""
        out = []
        for event in body.split(_SEP):
            parsed = _event_json(event) if event else None
            err = parsed.get("error") if parsed is not None else None
            if isinstance(err, dict):
                self.error = err
                message = err.get("message") if isinstance(err.get("message"), str) else "upstream error"
                code = err.get("code") if isinstance(err.get("code"), str) else "upstream_error"
                event = b"data: " + orjson.dumps(
                    {"error": {"message": message, "type": "api_error", "param": None, "code": code}}
                )
            out.append(event)
        return _SEP.join(out)

    def leftover(self) -> bytes:
        return self._buf
