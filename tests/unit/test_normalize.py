from __future__ import annotations

from typing import Any

import pytest

from gateway.config import Model, OutputTokens, Route
from gateway.edge.exchange import Kind
from gateway.errors import InvalidJSONError, InvalidRequestError
from gateway.relay.normalize import alias_of, parse_body, prepare

MODEL = Model(name="fast", route=Route(pool="small"), max_tokens=OutputTokens(default=100, cap=1000))


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "fast", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_default_max_tokens_applied_and_model_rewritten() -> None:
    p = prepare(Kind.CHAT, chat(), MODEL, "upstream-model")
    assert p.body["max_completion_tokens"] == 100
    assert p.body["model"] == "upstream-model"
    assert p.max_tokens == 100


def test_cap_lowers_large_requests() -> None:
    assert prepare(Kind.CHAT, chat(max_tokens=5000), MODEL, "u").body["max_tokens"] == 1000


def test_max_completion_tokens_wins_and_only_one_field_is_sent() -> None:
    p = prepare(Kind.CHAT, chat(max_tokens=50, max_completion_tokens=70), MODEL, "u")
    assert p.body["max_completion_tokens"] == 70
    assert "max_tokens" not in p.body


def test_completions_use_max_tokens() -> None:
    p = prepare(Kind.COMPLETIONS, {"model": "fast", "prompt": "x"}, MODEL, "u")
    assert p.body["max_tokens"] == 100


def test_unknown_fields_pass_through_untouched() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    extra = {
        "tools": tools,
        "response_format": {"type": "json_object"},
        "logprobs": True,
        "seed": 7,
        "user": "u1",
    }
    p = prepare(Kind.CHAT, chat(**extra), MODEL, "u")
    for k, v in extra.items():
        assert p.body[k] == v


@pytest.mark.parametrize(
    ("opts", "client_usage"),
    [(None, False), ({"include_usage": False}, False), ({"include_usage": True}, True)],
)
def test_streams_always_request_usage_upstream(opts: dict[str, Any] | None, client_usage: bool) -> None:
    body = chat(stream=True) if opts is None else chat(stream=True, stream_options=opts)
    p = prepare(Kind.CHAT, body, MODEL, "u")
    assert p.body["stream_options"]["include_usage"] is True
    assert p.client_usage is client_usage
    assert p.stream


def test_stream_options_without_stream_is_dropped() -> None:
    p = prepare(Kind.CHAT, chat(stream_options={"include_usage": True}), MODEL, "u")
    assert "stream_options" not in p.body


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        (Kind.CHAT, {"model": "fast"}, "messages"),
        (Kind.CHAT, {"model": "fast", "messages": []}, "messages"),
        (Kind.CHAT, {"model": "fast", "messages": "hi"}, "messages"),
        (Kind.CHAT, {"model": "fast", "messages": [1]}, "messages[0]"),
        (Kind.CHAT, {"model": "fast", "messages": [{"content": "x"}]}, "messages[0].role"),
        (Kind.CHAT, {"model": "fast", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (Kind.CHAT, chat(stream="yes"), "stream"),
        (Kind.CHAT, chat(stream_options=[1], stream=True), "stream_options"),
        (Kind.CHAT, chat(stream=True, stream_options={"include_usage": "y"}), "stream_options.include_usage"),
        (Kind.CHAT, chat(max_tokens="10"), "max_tokens"),
        (Kind.CHAT, chat(max_tokens=0), "max_tokens"),
        (Kind.CHAT, chat(max_tokens=True), "max_tokens"),
        (Kind.CHAT, chat(max_completion_tokens=-1), "max_completion_tokens"),
        (Kind.CHAT, chat(n=0), "n"),
        (Kind.COMPLETIONS, {"model": "fast"}, "prompt"),
        (Kind.COMPLETIONS, {"model": "fast", "prompt": [1, "a"]}, "prompt"),
        (Kind.COMPLETIONS, {"model": "fast", "prompt": {}}, "prompt"),
        (Kind.EMBEDDINGS, {"model": "fast"}, "input"),
    ],
)
def test_bad_input_is_a_400_naming_the_param(kind: Kind, body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        prepare(kind, body, MODEL, "u")
    assert info.value.status == 400
    assert info.value.param == param


@pytest.mark.parametrize("raw", [b"", b"{", b"[1,2]", b'"s"', b"\xff\xfe"])
def test_parse_body_rejects_non_objects(raw: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        parse_body(raw)


def test_invalid_json_has_its_own_code() -> None:
    with pytest.raises(InvalidJSONError) as info:
        parse_body(b"{nope")
    assert info.value.code == "invalid_json"


@pytest.mark.parametrize("body", [{}, {"model": None}, {"model": 3}, {"model": ""}])
def test_alias_must_be_a_string(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        alias_of(body)
    assert info.value.param == "model"
