"""`KeepingSplitter` (gateway.sse): the events a dialect's translator gets from the relay are exactly
the events of the bytes the relay forwards, whatever the framing and however the reads are cut, so
the dialect never needs to split the bytes again."""

from __future__ import annotations

import random

import orjson
import pytest

from gateway.sse import DONE, KeepingSplitter, SSESplitter, complete_events, data_of, payloads

CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def stream(eol: bytes) -> bytes:
    def ev(obj: object, *fields: bytes) -> bytes:
        return b"".join(f + eol for f in fields) + b"data: " + orjson.dumps(obj) + eol + eol

    usage = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    return b"".join(
        [
            b": keep-alive" + eol + eol,
            ev({**CHUNK, "choices": [{"index": 0, "delta": {"content": "a"}}], "usage": usage}),
            ev({**CHUNK, "choices": [{"index": 0, "delta": {"content": "b"}}]}, b"id: 7"),
            ev({"error": {"message": "engine died at 10.0.0.7", "code": 500}}),
            ev({**CHUNK, "choices": [], "usage": usage}),
            b"data:[DONE]" + eol + eol,
        ]
    )


def _data(out: bytes) -> list[bytes]:
    """The data of the events of `out`, read whole by gateway.sse."""
    return [d for d in (data_of(e) for e in complete_events(out)[0]) if d is not None]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("seed", range(6))
def test_the_kept_events_are_the_forwarded_events(eol: bytes, seed: int) -> None:
    data = stream(eol)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 5))
    split = KeepingSplitter(strip_usage=True, strip_continuous=True, pool="small")
    out, kept = b"", []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        piece, _ = split.feed(data[a:b])
        out += piece
        kept += split.take()
    assert kept == _data(out)
    assert kept[-1] == b"[DONE]" and split.saw_done
    # the policy applied: continuous usage stripped, the usage-only chunk cut, the error normalized
    chunks = [orjson.loads(k) for k in kept[:-1]]
    assert [c.get("usage") for c in chunks] == [None, None, None]
    assert "10.0.0.7" not in out.decode() and "pool 'small'" in chunks[2]["error"]["message"]


def test_it_forwards_what_the_plain_splitter_forwards() -> None:
    data = stream(b"\n")
    plain, keeping = SSESplitter(strip_usage=False), KeepingSplitter(strip_usage=False)
    assert keeping.feed(data)[0] == plain.feed(data)[0]
    assert keeping.usage == plain.usage and keeping.events == plain.events


def test_reset_forgets_an_abandoned_stream() -> None:
    split = KeepingSplitter(strip_usage=False)
    split.feed(b'data: {"usage": {"completion_tokens": 3}, "choices": []}\n\ndata: {"a"')
    split.reset()
    assert split.take() == [] and split.usage is None and split.events == 0 and not split.saw_done
    assert split.feed(DONE) == (DONE, False) and split.take() == [b"[DONE]"]


def test_payloads_of_a_captured_stream() -> None:
    data = stream(b"\r\n")
    assert [orjson.loads(p).get("choices") for p in payloads(data)][:2] == [
        [{"index": 0, "delta": {"content": "a"}}],
        [{"index": 0, "delta": {"content": "b"}}],
    ]
    assert b"[DONE]" not in list(payloads(data))
    assert list(payloads(b'data: {"a": 1}\n\ndata: {"unfinished"')) == [b'{"a": 1}']
