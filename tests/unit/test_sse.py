from __future__ import annotations

import orjson
import pytest

from gateway.sse import DONE, SSESplitter


def ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


CONTENT = [
    ev({"id": "c", "choices": [{"index": 0, "delta": {"content": f"t{i}"}}], "usage": None}) for i in range(3)
]
USAGE = ev(
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
)
STREAM = b"".join(CONTENT) + USAGE + DONE


def relay(split: SSESplitter, data: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(data), size):
        chunk, _ = split.feed(data[i : i + size])
        out += chunk
    return out


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_bytes_pass_through_unchanged_when_client_wants_usage(size: int) -> None:
    s = SSESplitter(strip_usage=False)
    assert relay(s, STREAM, size) == STREAM
    assert s.usage == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert s.saw_done
    assert s.leftover() == b""


@pytest.mark.parametrize("size", [1, 13, 10_000])
def test_usage_chunk_is_cut_out_otherwise(size: int) -> None:
    s = SSESplitter(strip_usage=True)
    assert relay(s, STREAM, size) == b"".join(CONTENT) + DONE
    assert s.usage is not None and s.usage["completion_tokens"] == 3


def test_continuous_usage_on_content_chunks_is_kept() -> None:
    chunk = ev({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"completion_tokens": 1}})
    s = SSESplitter(strip_usage=True)
    out, has_output = s.feed(chunk)
    assert out == chunk and has_output
    assert s.usage == {"completion_tokens": 1}


def test_spaced_json_is_understood() -> None:
    spaced = b'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}\n\n'
    s = SSESplitter(strip_usage=True)
    out, has_output = s.feed(spaced + DONE)
    assert out == DONE and not has_output
    assert s.usage == {"prompt_tokens": 1, "completion_tokens": 2}


def test_vllm_error_event_is_normalized_in_the_gateways_words() -> None:
    s = SSESplitter(strip_usage=True, pool="small")
    secret = "boom at http://10.0.0.7:8000 token=abc"
    out, _ = s.feed(ev({"error": {"message": secret, "type": "InternalServerError", "code": 500}}) + DONE)
    first = out.split(b"\n\n")[0]
    assert orjson.loads(first[6:]) == {
        "error": {
            "message": "pool 'small' reported an error during the stream",
            "type": "api_error",
            "param": None,
            "code": "upstream_error",
        }
    }
    assert b"10.0.0.7" not in out
    assert out.endswith(DONE)
    assert s.error is not None


def test_partial_event_is_held_back() -> None:
    s = SSESplitter(strip_usage=False)
    out, has_output = s.feed(CONTENT[0][:10])
    assert out == b"" and not has_output
    assert s.leftover() == CONTENT[0][:10]
