"""The SSE splitter on every framing the WHATWG spec allows: CRLF/CR/LF line ends, `data:` with or
without a space, comments, event/id/retry fields, multi-line data, and its bound on an event's size.
Whatever the framing, the bytes relayed are the bytes received (unless a usage chunk is cut)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from gateway.errors import BadResponse
from gateway.sse import DONE, EventTooLarge, SSESplitter, data_of

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def chunk(i: int) -> bytes:
    return orjson.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": f"t{i}"}}]})


def usage_chunk() -> bytes:
    return orjson.dumps({"id": "c", "choices": [], "usage": USAGE})


def relay(split: SSESplitter, data: bytes, size: int) -> tuple[bytes, int]:
    """Feed `data` in pieces of `size`; (bytes forwarded, how many feeds reported output)."""
    out, outputs = b"", 0
    for i in range(0, len(data), size):
        piece, has_output = split.feed(data[i : i + size])
        out += piece
        outputs += has_output
    return out, outputs


def framed(eol: bytes, events: list[list[bytes]]) -> bytes:
    """Events (each a list of lines) with `eol` after each line and a blank line after each event."""
    return b"".join(b"".join(line + eol for line in lines) + eol for lines in events)


STREAM_LINES = [[b"data: " + chunk(i)] for i in range(3)] + [[b"data: " + usage_chunk()], [b"data: [DONE]"]]


@pytest.mark.parametrize("eol", [b"\r\n", b"\r", b"\n"], ids=["crlf", "cr", "lf"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_every_line_ending_splits_and_relays_unchanged(eol: bytes, size: int) -> None:
    stream = framed(eol, STREAM_LINES)
    s = SSESplitter(strip_usage=False)
    out, outputs = relay(s, stream, size)
    assert out == stream
    assert s.saw_done and s.usage == USAGE
    assert s.events == 4  # three content chunks and the usage chunk; [DONE] is no output
    assert outputs >= 1
    assert s.leftover() == b""


@pytest.mark.parametrize("eol", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_the_usage_chunk_is_cut_out_whatever_the_framing(eol: bytes) -> None:
    stream = framed(eol, STREAM_LINES)
    s = SSESplitter(strip_usage=True)
    out, _ = relay(s, stream, 5)
    assert out == framed(eol, STREAM_LINES[:3] + STREAM_LINES[4:])
    assert s.usage == USAGE and s.saw_done


@pytest.mark.parametrize("done", [b"data:[DONE]", b"data: [DONE]", b"data:  [DONE]"])
@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_done_is_recognised_with_or_without_the_space(done: bytes, eol: bytes) -> None:
    stream = framed(eol, [[b"data: " + chunk(0)], [done]])
    s = SSESplitter(strip_usage=True)
    out, _ = relay(s, stream, 10_000)
    assert out == stream
    # The spec strips exactly one space: "data:  [DONE]" carries " [DONE]", which is not the end.
    assert s.saw_done is (done != b"data:  [DONE]")


def test_done_inside_content_is_not_the_end() -> None:
    content = orjson.dumps({"choices": [{"index": 0, "delta": {"content": "[DONE]"}}]})
    s = SSESplitter(strip_usage=True)
    out, has_output = s.feed(b"data: " + content + b"\n\n")
    assert has_output and not s.saw_done and s.events == 1


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_comments_and_keep_alives_are_relayed_but_are_no_output(eol: bytes) -> None:
    s = SSESplitter(strip_usage=True)
    keep_alive = framed(eol, [[b": keep-alive"]]) + framed(eol, [[b":"]])
    out, has_output = s.feed(keep_alive)
    assert out == keep_alive and not has_output and s.events == 0
    data = framed(eol, [[b": ping", b"data: " + chunk(0)]])
    out, has_output = s.feed(data)
    assert out == data and has_output and s.events == 1


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_fields_before_data_do_not_hide_the_usage(eol: bytes) -> None:
    usage_event = [b"event: usage", b"id: 7", b"retry: 1000", b"data:" + usage_chunk()]
    stream = framed(eol, [[b"id: 6", b"data: " + chunk(0)], usage_event, [b"data: [DONE]"]])
    s = SSESplitter(strip_usage=True)
    out, _ = relay(s, stream, 9)
    assert s.usage == USAGE
    assert out == framed(eol, [[b"id: 6", b"data: " + chunk(0)], [b"data: [DONE]"]])
    assert s.events == 1 and s.saw_done


def test_an_event_of_fields_only_is_no_output() -> None:
    s = SSESplitter(strip_usage=True)
    out, has_output = s.feed(b"event: ping\nid: 3\nretry: 500\n\n")
    assert out == b"event: ping\nid: 3\nretry: 500\n\n" and not has_output


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_multi_line_data_is_joined_before_parsing(eol: bytes) -> None:
    text = orjson.dumps({"choices": [], "usage": USAGE}, option=orjson.OPT_INDENT_2)
    lines = [b"data: " + line for line in text.split(b"\n")]
    stream = framed(eol, [lines, [b"data: [DONE]"]])
    s = SSESplitter(strip_usage=False)
    out, _ = relay(s, stream, 4)
    assert out == stream and s.usage == USAGE and s.saw_done


def test_data_of_follows_the_spec() -> None:
    assert data_of(b"data: a\ndata:b\ndata\n\n") == b"a\nb\n"
    assert data_of(b": comment\n\n") is None
    assert data_of(b"event: x\r\nid: 1\r\n\r\n") is None
    assert data_of(b"datax: no\ndata: yes\n\n") == b"yes"


@pytest.mark.parametrize("eol", [b"\r\n", b"\n"], ids=["crlf", "lf"])
def test_an_unfinished_event_past_the_bound_is_an_upstream_error(eol: bytes) -> None:
    s = SSESplitter(strip_usage=True, max_event=1000)
    s.feed(b"data: " + b"x" * 500)
    with pytest.raises(EventTooLarge) as info:
        s.feed(b"x" * 600 + eol)  # still no blank line: 1,106 bytes held
    assert isinstance(info.value, BadResponse) and "stream event" in info.value.reason
    assert len(s.leftover()) <= 1000  # nothing was added past the bound


def test_events_up_to_the_bound_pass() -> None:
    s = SSESplitter(strip_usage=True, max_event=1000)
    event = b"data: " + b"x" * 990 + b"\n\n"
    out, has_output = relay(s, event * 3, 300)
    assert out == event * 3 and has_output == 3 and s.events == 3


def test_a_continuous_usage_chunk_is_stripped_in_crlf_framing() -> None:
    body = orjson.dumps(
        {"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"completion_tokens": 1}}
    )
    s = SSESplitter(strip_usage=True, strip_continuous=True)
    out, has_output = s.feed(b"data: " + body + b"\r\n\r\n")
    assert has_output and s.usage == {"completion_tokens": 1}
    assert orjson.loads(data_of(out) or b"") == {"choices": [{"index": 0, "delta": {"content": "a"}}]}


def _reference_events(stream: bytes) -> list[bytes]:
    """The data of each event a WHATWG parser dispatches (a slow, obvious reading of the spec)."""
    text = re.sub(rb"\r\n|\r", b"\n", stream)
    out = []
    for block in text.split(b"\n\n"):
        data = data_of(block)
        if data is not None:
            out.append(data)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_random_framings_and_cuts_agree_with_a_reference_parser(seed: int) -> None:
    rng = random.Random(seed)
    events: list[list[bytes]] = []
    for i in range(rng.randint(1, 12)):
        kind = rng.choice(["data", "comment", "fields", "multi"])
        if kind == "data":
            events.append([rng.choice([b"data: ", b"data:"]) + chunk(i)])
        elif kind == "comment":
            events.append([b": keep-alive"])
        elif kind == "fields":
            events.append([b"event: message", b"id: " + str(i).encode(), b"data: " + chunk(i)])
        else:
            events.append([b"data: {", b'data: "n": ' + str(i).encode() + b"}"])
    events.append([b"data:[DONE]"])
    eols = [b"\r\n", b"\r", b"\n"]
    stream = b"".join(
        b"".join(line + rng.choice(eols) for line in lines) + rng.choice(eols) for lines in events
    )
    s = SSESplitter(strip_usage=False)
    out = b""
    i = 0
    while i < len(stream):
        step = rng.randint(1, 40)
        out += s.feed(stream[i : i + step])[0]
        i += step
    expected = _reference_events(stream)
    assert out + s.leftover() == stream
    assert s.saw_done
    assert s.events == len(expected) - 1  # every data event but [DONE]


def test_the_common_vllm_stream_takes_the_lean_path_unchanged() -> None:
    stream = b"".join(b"data: " + chunk(i) + b"\n\n" for i in range(3)) + DONE
    s = SSESplitter(strip_usage=True)
    out, outputs = relay(s, stream, 10_000)
    assert out == stream and outputs == 1 and s.events == 3 and s.saw_done
