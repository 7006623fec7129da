"""Server-sent events: the one place the gateway splits SSE bytes into events.

Every runtime reader of events reads them through this module: the relay's stream (`SSESplitter`,
built with the relay's policy in gateway/relay/_stream.py, fed by gateway.upstream.calls until the
first event), the dialects (the events the splitter found, handed over with the relayed bytes; or
`complete_events` for bytes the gateway wrote itself), the json_schema stream check
(`complete_events`, `event_json`), the response cache (`payloads` of a captured stream: `cache/`
never imports the gateway, it is handed the payloads) and the request log (`payloads`). It sits in
the lowest layer (it imports only gateway.errors) so that all of them may import it;
tests/unit/test_sse_single_reader.py checks that no other runtime module splits SSE.

The gateway never re-serializes content chunks: it splits the upstream byte stream at event
boundaries, forwards complete events as they are, and looks inside only for the usage object (to
meter tokens), the end (`[DONE]`) and error events (to normalize them). The usage-only chunk
(`"choices":[]` plus a usage object) is cut out when the client did not ask for it.

Framing is the WHATWG one: a line ends with CRLF, LF or CR; a blank line ends an event; a line is
a field (`data:`, `event:`, `id:`, `retry:`, with or without a space after the colon) or a comment
(`: keep-alive`); an event's data is its `data` lines joined by LF. Two paths read it:
- the common one, what vLLM sends (whole LF-framed events of one `data:` line each, no error, not
  the stream's last read): a few `bytes.count`/`find` calls per upstream read; JSON is parsed only
  for the usage events;
- everything else (CR or CRLF endings, comments, other fields, multi-line data, error events, the
  `[DONE]` read): event by event, by the spec. Its bytes are still relayed as they came.
Only data events count as output (comments and keep-alives are no tokens, and do not end the wait
for the first one). An event may not grow past `MAX_EVENT_BYTES` unfinished: the buffer is bounded,
the stream fails with an `EventTooLarge` (a `BadResponse`: the upstream's fault).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import orjson

from gateway.errors import BadResponse

DONE = b"data: [DONE]\n\n"
_SEP = b"\n\n"
MAX_EVENT_BYTES = 1 << 20  # an event still incomplete past this is an upstream error
# A blank line: two line ends (a lone CR must not be the CR of a CRLF).
_BOUNDARY = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE = re.compile(rb"\r\n|\r|\n")

log = logging.getLogger("llmgw.upstream")


class EventTooLarge(BadResponse):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"an SSE event reached {size} bytes unfinished (limit {limit})",
            f"a stream event larger than {limit >> 10} KiB",
        )


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
    """The [start, end) of the event (including its separator) that contains byte `at` (LF framing)."""
    start = part.rfind(_SEP, 0, at)
    start = 0 if start == -1 else start + 2
    end = part.find(_SEP, at)
    end = len(part) if end == -1 else end + 2
    return start, end


def data_of(event: bytes) -> bytes | None:
    """An event's data: its `data` fields' values joined by LF; None if it has none (a comment, a
    blank line, an event of only `event:`/`id:`/`retry:` fields)."""
    values: list[bytes] | None = None
    for line in _LINE.split(event):
        name, colon, value = line.partition(b":")
        if name != b"data":
            continue
        if colon and value[:1] == b" ":
            value = value[1:]
        if values is None:
            values = [value]
        else:
            values.append(value)
    return None if values is None else b"\n".join(values)


def event_json(event: bytes) -> dict[str, Any] | None:
    """An event's data as a JSON object (one `data:` line, with or without its space, or several
    joined); None for anything else ([DONE], a comment, not JSON)."""
    line = event.strip()
    if line.startswith(b"data:") and line.find(b"\n") == -1 and line.find(b"\r") == -1:
        data = line[5:]  # one data line (the usual): orjson skips the space
    else:
        found = data_of(event)
        if found is None:
            return None
        data = found
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def payloads(sse: bytes) -> Iterator[bytes]:
    """The data of each data event of a whole stream (a captured answer), in order; `[DONE]`,
    comments and field-only events left out, and an unfinished last event too."""
    for event in complete_events(sse)[0]:
        data = data_of(event)
        if data is not None and data != b"[DONE]":
            yield data


def complete_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """The complete events at the start of `buf` (any of SSE's line ends), and the unfinished rest."""
    end = _last_boundary(buf, 0)
    if end == -1:
        return [], buf
    return _BOUNDARY.split(buf[:end])[:-1], buf[end:]


def _last_boundary(buf: bytes, start: int) -> int:
    """The end of the last blank line in `buf` at or after `start`, or -1."""
    end = -1
    for m in _BOUNDARY.finditer(buf, start):
        end = m.end()
    return end


class SSESplitter:
    """Incremental splitter for one upstream stream. Its policy is its caller's (the relay's): cut the
    usage-only chunk (`strip_usage`), strip per-chunk usage the gateway asked for (`strip_continuous`).
    `KeepingSplitter` also hands over each forwarded event's data."""

    __slots__ = (
        "_buf", "strip_usage", "strip_continuous", "usage", "saw_done", "error", "events", "meta",
        "pool", "rid", "max_event", "kept",
    )  # fmt: skip
    KEEPS = False  # whether `kept` collects the forwarded events' data (KeepingSplitter)

    def __init__(
        self,
        strip_usage: bool,
        strip_continuous: bool = False,
        *,
        pool: str = "",
        rid: str | None = None,
        max_event: int = MAX_EVENT_BYTES,
    ) -> None:
        self._buf = b""
        self.strip_usage = strip_usage
        # The gateway asked for per-chunk usage (to meter a stream as it runs) that the client did not:
        # those chunks are the only ones ever re-serialized, without their usage member.
        self.strip_continuous = strip_continuous
        self.usage: dict[str, Any] | None = None
        self.saw_done = False
        self.error: dict[str, Any] | None = None  # an error event the pool sent mid-stream
        self.events = 0  # output (data) events forwarded
        self.meta: dict[str, Any] | None = None  # id/object/created/model of a parsed chunk
        self.pool = pool  # for the error message and the log line of a mid-stream error
        self.rid = rid
        self.max_event = max_event
        # KeepingSplitter's: the data of each event forwarded since the last `take` ([DONE] included).
        self.kept: list[bytes] | None = [] if self.KEEPS else None

    def reset(self) -> None:
        """Forget a stream abandoned before its first event (another replica is tried)."""
        self._buf = b""
        self.usage = self.error = self.meta = None
        self.saw_done = False
        self.events = 0
        if self.kept is not None:
            self.kept = []

    @property
    def produced(self) -> int:
        """Output tokens so far: the pool's cumulative usage when it reports one, else events seen."""
        usage = self.usage
        if usage is not None:
            ct = usage.get("completion_tokens")
            if isinstance(ct, int):
                return ct
        return self.events

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Complete events to forward now, and whether any of them carried generated output.
        Raises `EventTooLarge` when an unfinished event outgrows `max_event`."""
        if self._buf or not data.endswith(_SEP):
            data = self._split(data)
            if not data:
                return data, False
        # The common case: whole LF-framed events of one `data:` line each, as vLLM writes them. It
        # is exactly when the read starts with `data:` and its every LF is one of the n blank-line
        # pairs, each but the last followed by `data:` (one-byte counts are the cheap ones). It is
        # read with a few scans; anything else event by event. ([DONE] is looked for as the read's
        # last event: it is the stream's last; a read that ends a stream usually carries it.)
        done = data.endswith(DONE)
        body = data[: -len(DONE)] if done else data
        n = body.count(b"\n\ndata:") + 1
        if (
            not body
            or body.count(b"\n") != 2 * n
            or not body.startswith(b"data:")
            # `find`, not `in`: on Python 3.11 `x in some_bytes` first tries x as an integer and
            # builds (and drops) a formatted TypeError, ~1,400 instructions per test, per read.
            or body.find(b"\r") != -1
            or body.find(b'"error"') != -1
            or body.find(b"[DONE]") != -1
        ):
            return self._by_event(data)
        at = body.find(b'"usage"')
        if at == -1:
            self.events += n
            out, has_output = body, True
        else:
            out, has_output = self._usage(body, n, at)
        if done:
            self.saw_done = True
            out += DONE
        return out, has_output

    def _usage(self, body: bytes, n: int, at: int) -> tuple[bytes, bool]:
        """`feed`'s common case with a `"usage"` in it: read it, and cut or strip what must be. (Each
        event is one `data:` line here: its JSON is what follows the colon.)"""
        at = _non_null_usage_at(body, at)
        while at != -1:
            s, e = _event_bounds(body, at)
            try:
                parsed = orjson.loads(body[s + 5 : e])
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("usage"), dict):
                self.usage = parsed.pop("usage")
                self.meta = parsed
                if parsed.get("choices") == []:
                    if self.strip_usage:
                        body = body[:s] + body[e:]
                        e = s
                        n -= 1
                elif self.strip_continuous:
                    event = b"data: " + orjson.dumps(parsed) + _SEP
                    body = body[:s] + event + body[e:]
                    e = s + len(event)
            at = _non_null_usage_at(body, e)
        self.events += n
        return body, n > 0

    def _split(self, data: bytes) -> bytes:
        """When events and reads do not line up, or the framing is not LF: the complete events in the
        held bytes and `data` (b"" if none); the rest is held, bounded by `max_event`."""
        held = len(self._buf)
        buf = self._buf + data if held else data
        cut = buf.rfind(_SEP, held - 1 if held else 0)
        if cut != -1:
            cut += 2
            rest = buf[cut:]
            if rest and rest.find(b"\r") != -1:  # a CR-framed event after the last LF one?
                later = _last_boundary(buf, cut)
                if later != -1:
                    cut, rest = later, buf[later:]
        elif buf.find(b"\r") != -1:
            cut = _last_boundary(buf, max(0, held - 3))
            rest = buf[cut:] if cut != -1 else buf
        elif buf == b"\n":
            # A lone LF at an event boundary: the second half of a CRLF whose CR ended the last read
            # (or a blank line), nothing either way. Forwarded, not held: a stream that ends on it
            # would otherwise lose its last byte.
            return buf
        else:
            rest = buf
        if len(rest) > self.max_event:
            raise EventTooLarge(len(rest), self.max_event)
        self._buf = rest
        return buf[:cut] if cut != -1 else b""

    def _by_event(self, body: bytes) -> tuple[bytes, bool]:
        """`feed` for any framing: each event read by the spec, forwarded as it came unless it is the
        usage chunk to cut, a continuous-usage chunk to strip or an error to normalize."""
        out: list[bytes] = []
        kept = self.kept
        start = 0
        outputs = 0
        for m in _BOUNDARY.finditer(body):
            event, start = body[start : m.end()], m.end()
            data = data_of(event)
            if data is None:
                out.append(event)  # a comment, a keep-alive, a blank line, event:/id:/retry: alone
                continue
            if data == b"[DONE]":
                self.saw_done = True
                out.append(event)
                if kept is not None:
                    kept.append(data)
                continue
            piece = self._data_event(event, data)
            if piece is not None:
                outputs += 1
                out.append(piece)
                if kept is not None:  # a piece written here (stripped, normalized) is `data: <json>\n\n`
                    kept.append(data if piece is event else piece[6:-2])
        out.append(body[start:])  # a lone LF (see `_split`); else b""
        self.events += outputs
        return b"".join(out), outputs > 0

    def _data_event(self, event: bytes, data: bytes) -> bytes | None:
        """What to forward for one data event (None: cut out, not output)."""
        if b'"usage"' not in data and b'"error"' not in data:
            return event
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return event
        if not isinstance(parsed, dict):
            return event
        err = parsed.get("error")
        if isinstance(err, dict):
            return self._normalized(err)
        if not isinstance(parsed.get("usage"), dict):
            return event
        self.usage = parsed.pop("usage")
        self.meta = parsed
        if parsed.get("choices") == []:
            return None if self.strip_usage else event
        if self.strip_continuous:
            return b"data: " + orjson.dumps(parsed) + _SEP
        return event

    def _normalized(self, err: dict[str, Any]) -> bytes:
        """A pool's mid-stream error event (vLLM: integer code) in the OpenAI shape, in the gateway's
        words: the pool's message is logged, not relayed."""
        self.error = err
        log.warning("pool %r sent an error event (request %s): %s", self.pool, self.rid, str(err)[:2000])
        where = f"pool '{self.pool}'" if self.pool else "the pool"
        body = {
            "message": f"{where} reported an error during the stream",
            "type": "api_error",
            "param": None,
            "code": "upstream_error",
        }
        return b"data: " + orjson.dumps({"error": body}) + _SEP

    def leftover(self) -> bytes:
        return self._buf


class KeepingSplitter(SSESplitter):
    """An `SSESplitter` that also keeps the data of each event it forwards, for a reader that needs
    the events themselves (a dialect's translator: gateway.dialects.exchange) and must not split the
    relayed bytes again. Every read goes event by event (a dialect's stream has usage in every chunk:
    the common path would not apply anyway)."""

    __slots__ = ()
    KEEPS = True

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        if self._buf or not data.endswith(_SEP):
            data = self._split(data)
            if not data:
                return data, False
        return self._by_event(data)

    def take(self) -> list[bytes]:
        """The data of the events forwarded since the last call, in order (`[DONE]` included)."""
        kept = self.kept
        assert kept is not None
        self.kept = []
        return kept
