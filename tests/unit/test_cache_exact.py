"""Pure parts of the exact cache: keys, the use decision, entry assembly and replay, the memory store."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from cache.entry import assemble, replay, split_question, usage_of, with_question
from cache.exact import MemoryExactStore
from cache.key import exact_key, is_deterministic, semantic_scope
from cache.policy import uses_cache
from gateway.sse import payloads

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_key_ignores_delivery_fields_and_order() -> None:
    k = exact_key("org:a", "p=m", "chat", BODY)
    assert (
        exact_key("org:a", "p=m", "chat", {**BODY, "stream": True, "stream_options": {"include_usage": True}})
        == k
    )
    assert exact_key("org:a", "p=m", "chat", {**BODY, "user": "u1", "metadata": {"x": 1}}) == k
    assert exact_key("org:a", "p=m", "chat", dict(reversed(list(BODY.items())))) == k


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.0001},
        {"max_tokens": 5},
        {"seed": 1},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"n": 2},
        {"logprobs": True},
    ],
)
def test_key_changes_with_anything_that_changes_the_answer(change: dict[str, object]) -> None:
    assert exact_key("org:a", "p=m", "chat", {**BODY, **change}) != exact_key("org:a", "p=m", "chat", BODY)


def test_key_is_scoped_by_tenant_route_and_endpoint() -> None:
    k = exact_key("org:a", "p=m", "chat", BODY)
    assert exact_key("org:b", "p=m", "chat", BODY) != k
    assert exact_key("org:a", "p=m2", "chat", BODY) != k
    assert exact_key("org:a", "p=m", "completions", BODY) != k
    # Length-prefixed parts: shifting a separator between parts gives another key.
    assert exact_key("org:ap", "=m", "chat", BODY) != k


def test_deterministic_and_use_decision() -> None:
    assert is_deterministic({"temperature": 0})
    assert is_deterministic({"temperature": 0.0})
    assert is_deterministic({"temperature": 1, "seed": 3})
    assert not is_deterministic({})
    assert not is_deterministic({"temperature": 0.2})
    assert not is_deterministic({"temperature": False})  # a bool is not a number here
    assert not is_deterministic({"seed": True})
    assert uses_cache("deterministic", None, {"temperature": 0})
    assert not uses_cache("deterministic", None, {"temperature": 1})
    assert uses_cache("deterministic", "on", {"temperature": 1})
    assert not uses_cache("deterministic", "off", {"temperature": 0})
    assert not uses_cache("off", None, {"temperature": 0})
    assert uses_cache("off", "on", {})
    assert not uses_cache(None, "on", {"temperature": 0})


def test_semantic_scope_separates_system_prompt_history_and_params() -> None:
    def body(system: str, question: str, **kw: object) -> dict[str, object]:
        return {
            "model": "m",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            **kw,
        }

    base = semantic_scope("org:a", "r", body("Be brief.", "What is DNS?"))
    assert base is not None
    # The question's text is not part of the partition (the embedding compares it) ...
    assert semantic_scope("org:a", "r", body("Be brief.", "Explain DNS")) == base
    # ... but the system prompt, parameters and tenant are.
    assert semantic_scope("org:a", "r", body("Be verbose.", "What is DNS?")) != base
    assert semantic_scope("org:a", "r", body("Be brief.", "What is DNS?", max_tokens=9)) != base
    assert semantic_scope("org:b", "r", body("Be brief.", "What is DNS?")) != base
    assert semantic_scope("org:a", "r", {"messages": [{"role": "assistant", "content": "x"}]}) is None
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    assert semantic_scope("org:a", "r", {"messages": [{"role": "user", "content": image}]}) is None


def _sse(*events: dict[str, object]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_stream_assembles_to_a_completion_and_replays_back() -> None:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m"}
    sse = _sse(
        {
            **head,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        },
        {**head, "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    entry = assemble(True, payloads(sse), usage)
    assert entry is not None
    body = orjson.loads(entry)
    assert body["object"] == "chat.completion" and body["id"] == "c1"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert usage_of(entry) == (3, 2)
    again = replay(True, entry, include_usage=True)
    assert again is not None and again.endswith(b"data: [DONE]\n\n")
    events = [orjson.loads(line[6:]) for line in again.split(b"\n\n") if line.startswith(b"data: {")]
    assert "".join(c["delta"].get("content") or "" for e in events for c in e["choices"]) == "Hello"
    assert events[-1]["usage"] == usage and events[-1]["choices"] == []
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    no_usage = replay(True, entry, include_usage=False)
    assert no_usage is not None and b'"usage"' not in no_usage


def test_tool_calls_survive_assembly_and_replay() -> None:
    head = {"id": "c2", "created": 1, "model": "m"}
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a"'}}
    more = {"index": 0, "function": {"arguments": ": 1}"}}
    sse = _sse(
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]},
        {**head, "choices": [{"index": 0, "delta": {"tool_calls": [more]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
    entry = assemble(True, payloads(sse), {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    assert entry is not None
    msg = orjson.loads(entry)["choices"][0]["message"]
    assert msg["content"] is None
    assert msg["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
    ]
    replayed = replay(True, entry, include_usage=False)
    assert replayed is not None and b'"tool_calls":[{"index":0' in replayed


def test_cut_or_failed_streams_are_not_stored() -> None:
    head = {"id": "c3", "created": 1, "model": "m"}
    unfinished = _sse({**head, "choices": [{"index": 0, "delta": {"content": "par"}, "finish_reason": None}]})
    assert assemble(True, payloads(unfinished), {}) is None
    failed = unfinished + b'data: {"error": {"message": "boom"}}\n\n'
    assert assemble(True, payloads(failed), {}) is None
    assert assemble(True, payloads(b"data: {not json\n\n"), {}) is None


def test_completions_replay() -> None:
    entry = orjson.dumps(
        {
            "id": "t",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": "abc", "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
        }
    )
    sse = replay(False, entry, include_usage=True)
    assert sse is not None
    events = [orjson.loads(line[6:]) for line in sse.split(b"\n\n") if line.startswith(b"data: {")]
    assert "".join(c["text"] for e in events for c in e["choices"]) == "abc"
    assert replay(False, b"not json", True) is None


def test_memory_store_ttl_and_byte_bound() -> None:
    now = [0.0]
    store = MemoryExactStore(max_bytes=100, clock=lambda: now[0])

    async def scenario() -> None:
        await store.set(b"k1", b"x" * 40, ttl_s=10)
        assert await store.get(b"k1") == b"x" * 40
        now[0] = 10.0
        assert await store.get(b"k1") is None  # expired
        assert store.size_bytes == 0
        await store.set(b"a", b"1" * 40, ttl_s=100)
        await store.set(b"b", b"2" * 40, ttl_s=100)
        await store.get(b"a")  # a is now the most recently used
        await store.set(b"c", b"3" * 40, ttl_s=100)  # over 100 bytes: the least recent (b) goes
        assert await store.get(b"b") is None
        assert await store.get(b"a") is not None and await store.get(b"c") is not None
        await store.set(b"big", b"z" * 200, ttl_s=100)  # larger than the whole store: not kept
        assert await store.get(b"big") is None
        assert store.size_bytes <= 100

    asyncio.run(scenario())


def test_semantic_entries_carry_their_question() -> None:
    value = with_question("How do I reset my password? ✓", b'{"id":"x"}')
    assert split_question(value) == ("How do I reset my password? ✓", b'{"id":"x"}')
    assert split_question(b'{"id":"x"}') is None
    assert split_question(value[:5]) is None
