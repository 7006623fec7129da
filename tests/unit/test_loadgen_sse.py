"""SSE parsing across arbitrary chunk boundaries, and what each payload means for timing."""

from __future__ import annotations

import orjson

from eval.loadgen.sse import SSEParser, classify


def _feed_all(parser: SSEParser, data: bytes, step: int) -> list[bytes]:
    out: list[bytes] = []
    for i in range(0, len(data), step):
        out += parser.feed(data[i : i + step])
    return out


STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n'
    b"data: [DONE]\n\n"
)


def test_events_are_the_same_whatever_the_chunking() -> None:
    whole = SSEParser().feed(STREAM)
    assert len(whole) == 5 and whole[-1] == b"[DONE]"
    for step in (1, 2, 7, 33):
        parser = SSEParser()
        assert _feed_all(parser, STREAM, step) == whole
        assert parser.pending == b""


def test_crlf_multiline_data_and_no_space() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: x\r\ndata:a\r\ndata: b\r\n\r\ndata: c") == [b"a\nb"]
    assert parser.pending == b"data: c"
    assert parser.feed(b"\n\n") == [b"c"]


def test_classify_content_usage_done_and_errors() -> None:
    events = [classify(e) for e in SSEParser().feed(STREAM)]
    assert [e.content for e in events] == [False, True, True, False, False]
    assert events[3].usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert events[4].done
    err = classify(orjson.dumps({"error": {"message": "upstream died", "type": "server_error"}}))
    assert err.error == "upstream died" and not err.content
    assert classify(b"not json").invalid
    assert classify(b"[1, 2]").invalid


def test_completions_text_and_tool_calls_count_as_content() -> None:
    assert classify(b'{"choices":[{"text":"x"}]}').content
    assert not classify(b'{"choices":[{"text":""}]}').content
    assert classify(b'{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}').content
