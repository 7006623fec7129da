"""The Anthropic Messages dialect (gateway.dialects.messages): tables of translations and refusals, and
the official anthropic SDK talking to it end to end over an httpx2.MockTransport (create, create with
stream=True, messages.stream(), count_tokens, errors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from gateway.dialects import Dialect
from gateway.dialects.messages import MessagesDialect, count_request
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

SEALER = Sealer(b"k" * 32)
D = MessagesDialect(sealer=SEALER)
USER = {"role": "user", "content": "hi"}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 16, "messages": [USER], **extra}


def test_is_a_dialect() -> None:
    dialect: Dialect = D
    assert dialect.name == "messages"


# -- to_chat: what each field and block becomes ----------------------------------------------------

IMG = "iVBORw0KGgo="
CALL = {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": '{"q":"x"}'}}
TRANSLATIONS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("minimal", body(), {"model": "claude-x", "max_tokens": 16, "stream": False, "messages": [USER]}),
    (
        "system string",
        body(system="be brief"),
        {"messages": [{"role": "system", "content": "be brief"}, USER]},
    ),
    (
        "system blocks, cache_control ignored",
        body(
            system=[
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "b"},
            ]
        ),
        {"messages": [{"role": "system", "content": "a\nb"}, USER]},
    ),
    ("empty system", body(system=""), {"messages": [USER]}),
    (
        "text blocks",
        body(
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        ),
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        },
    ),
    (
        "base64 image",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": IMG},
                        }
                    ],
                }
            ]
        ),
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMG}"}}],
                }
            ]
        },
    ),
    (
        "url image",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "url": "https://i/x.png"}}],
                }
            ]
        ),
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://i/x.png"}}]}
            ]
        },
    ),
    (
        "assistant text + tool_use, the gateway's own thinking dropped",
        body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": SEALER.sign("hmm")},
                        {"type": "redacted_thinking", "data": SEALER.seal("x")},
                        {"type": "text", "text": "let me look"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "x"}},
                    ],
                },
            ]
        ),
        {"messages": [USER, {"role": "assistant", "content": "let me look", "tool_calls": [CALL]}]},
    ),
    (
        "assistant tool_use only",
        body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "x"}}],
                },
            ]
        ),
        {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}]},
    ),
    (
        "assistant prefill string",
        body(messages=[USER, {"role": "assistant", "content": "The answer is ("}]),
        {"messages": [USER, {"role": "assistant", "content": "The answer is ("}]},
    ),
    (
        "tool_result before the turn's text",
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "and now?"},
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_3",
                            "content": "boom",
                            "is_error": True,
                        },
                        {"type": "tool_result", "tool_use_id": "toolu_4"},
                    ],
                }
            ]
        ),
        {
            "messages": [
                {"role": "tool", "tool_call_id": "toolu_1", "content": "42"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "a\nb"},
                {"role": "tool", "tool_call_id": "toolu_3", "content": "Error: boom"},
                {"role": "tool", "tool_call_id": "toolu_4", "content": ""},
                {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
            ]
        },
    ),
    (
        "tool_result only: no user message",
        body(
            messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
            ]
        ),
        {"messages": [{"role": "tool", "tool_call_id": "t", "content": "ok"}]},
    ),
    ("stop_sequences", body(stop_sequences=["END", "\n\n"]), {"stop": ["END", "\n\n"]}),
    ("sampling", body(temperature=0.5, top_p=1, top_k=40), {"temperature": 0.5, "top_p": 1, "top_k": 40}),
    ("metadata.user_id", body(metadata={"user_id": "u-1"}), {"user": "u-1"}),
    (
        "stream",
        body(stream=True),
        {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    ),
    (
        "custom tools",
        body(
            tools=[
                {
                    "name": "get",
                    "description": "fetch",
                    "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "custom", "name": "put", "input_schema": {"type": "object", "properties": {}}},
            ]
        ),
        {
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "get", "description": "fetch", "parameters": {"type": "object"}},
                },
                {
                    "type": "function",
                    "function": {"name": "put", "parameters": {"type": "object", "properties": {}}},
                },
            ]
        },
    ),
    (
        "json_schema output",
        body(
            output_config={"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}
        ),
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": {"type": "object"}},
            }
        },
    ),
]
_TOOLS = [{"name": "get", "input_schema": {"type": "object"}}]
CHOICES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any"}, {"tool_choice": "required"}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "tool", "name": "get"}, {"tool_choice": {"type": "function", "function": {"name": "get"}}}),
    (
        {"type": "auto", "disable_parallel_tool_use": True},
        {"tool_choice": "auto", "parallel_tool_calls": False},
    ),
    ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
]
DROPPED: list[tuple[str, Any]] = [
    ("service_tier", "auto"),
    ("container", "container_1"),
    ("container", {"id": "c", "skills": []}),
    ("mcp_servers", []),
    ("context_management", {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
    ("inference_geo", "us"),
    ("some_future_field", {"type": "enabled"}),
]


@pytest.mark.parametrize(("name", "request_body", "expected"), TRANSLATIONS, ids=[t[0] for t in TRANSLATIONS])
def test_to_chat(name: str, request_body: dict[str, Any], expected: dict[str, Any]) -> None:
    chat = D.to_chat(request_body)
    assert {k: chat.get(k) for k in expected} == expected


@pytest.mark.parametrize(("choice", "expected"), CHOICES)
def test_tool_choice(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    chat = D.to_chat(body(tools=_TOOLS, tool_choice=choice))
    assert {k: chat[k] for k in ("tool_choice", "parallel_tool_calls") if k in chat} == expected


def test_non_forcing_tool_choice_without_tools_is_not_sent() -> None:
    assert "tool_choice" not in D.to_chat(body(tool_choice={"type": "auto"}))


@pytest.mark.parametrize(("field", "value"), DROPPED)
def test_accepted_and_dropped(field: str, value: Any) -> None:
    chat = D.to_chat(body(**{field: value}))
    assert chat == D.to_chat(body())


def test_top_k_zero_is_off_and_no_stream_options_unstreamed() -> None:
    chat = D.to_chat(body(top_k=0, stream=False))
    assert "top_k" not in chat and "stream_options" not in chat and chat["stream"] is False


def test_to_chat_does_not_touch_the_request() -> None:
    request = body(system=[{"type": "text", "text": "a"}], tools=_TOOLS, stream=True)
    before = orjson.dumps(request)
    D.to_chat(request)
    assert orjson.dumps(request) == before


# -- to_chat: refusals, each with its Anthropic param ----------------------------------------------


def _user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    ({"max_tokens": 16, "messages": [USER]}, "model", "missing_required_parameter"),
    (body(model=3), "model", "invalid_type"),
    ({"model": "m", "messages": [USER]}, "max_tokens", "missing_required_parameter"),
    (body(max_tokens=0), "max_tokens", "invalid_value"),
    (body(max_tokens="16"), "max_tokens", "invalid_type"),
    (body(max_tokens=True), "max_tokens", "invalid_type"),
    (body(messages=[]), "messages", "invalid_type"),
    ({"model": "m", "max_tokens": 1}, "messages", "missing_required_parameter"),
    (body(messages=["hi"]), "messages[0]", "invalid_type"),
    (body(messages=[{"role": "system", "content": 3}]), "messages[0].content", "invalid_type"),
    (body(messages=[USER, {"role": "tool", "content": "x"}]), "messages[1].role", "invalid_value"),
    (body(messages=[{"content": "x"}]), "messages[0].role", "missing_required_parameter"),
    (body(messages=[{"role": "user"}]), "messages[0].content", "missing_required_parameter"),
    (body(messages=[{"role": "user", "content": 5}]), "messages[0].content", "invalid_type"),
    (body(messages=_user({"text": "x"})), "messages[0].content[0].type", "missing_required_parameter"),
    (body(messages=_user({"type": "text", "text": 1})), "messages[0].content[0].text", "invalid_type"),
    (
        body(messages=[USER, USER, {"role": "user", "content": [{"type": "document", "source": {}}]}]),
        "messages[2].content[0].type",
        "unsupported_value",
    ),
    (body(messages=_user({"type": "search_result"})), "messages[0].content[0].type", "unsupported_value"),
    (body(messages=_user({"type": "server_tool_use"})), "messages[0].content[0].type", "unsupported_value"),
    (
        body(messages=_user({"type": "web_search_tool_result"})),
        "messages[0].content[0].type",
        "unsupported_value",
    ),
    (body(messages=_user({"type": "mystery"})), "messages[0].content[0].type", "unsupported_value"),
    (
        body(messages=_user({"type": "tool_use", "id": "t", "name": "n", "input": {}})),
        "messages[0].content[0].type",
        "invalid_value",
    ),
    (
        body(
            messages=[USER, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]
        ),
        "messages[1].content[0].type",
        "invalid_value",
    ),
    (
        body(
            messages=[
                USER,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": []}]},
            ]
        ),
        "messages[1].content[0].input",
        "invalid_type",
    ),
    (
        body(
            messages=[USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}]
        ),
        "messages[1].content[0].name",
        "missing_required_parameter",
    ),
    (
        body(messages=_user({"type": "tool_result", "content": "x"})),
        "messages[0].content[0].tool_use_id",
        "missing_required_parameter",
    ),
    (
        body(
            messages=_user(
                {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}
            )
        ),
        "messages[0].content[0].content[0].type",
        "unsupported_value",
    ),
    (
        body(messages=_user({"type": "tool_result", "tool_use_id": "t", "is_error": "yes"})),
        "messages[0].content[0].is_error",
        "invalid_type",
    ),
    (
        body(
            messages=_user(
                {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "x"}}
            )
        ),
        "messages[0].content[0].source.media_type",
        "invalid_value",
    ),
    (
        body(messages=_user({"type": "image", "source": {"type": "file", "file_id": "f"}})),
        "messages[0].content[0].source.type",
        "unsupported_value",
    ),
    (body(messages=_user({"type": "image"})), "messages[0].content[0].source", "missing_required_parameter"),
    (body(system=5), "system", "invalid_type"),
    (body(system=[{"type": "image"}]), "system[0].type", "invalid_value"),
    (body(temperature="hot"), "temperature", "invalid_type"),
    (body(temperature=1.5), "temperature", "invalid_value"),
    (body(top_p=-0.1), "top_p", "invalid_value"),
    (body(top_k=1.5), "top_k", "invalid_type"),
    (body(top_k=-1), "top_k", "invalid_value"),
    (body(stop_sequences="END"), "stop_sequences", "invalid_type"),
    (body(stop_sequences=["a", 1]), "stop_sequences", "invalid_type"),
    (body(metadata="u"), "metadata", "invalid_type"),
    (body(metadata={"user_id": 7}), "metadata.user_id", "invalid_type"),
    (body(stream="yes"), "stream", "invalid_type"),
    (body(tools={}), "tools", "invalid_type"),
    (body(tools=[{"type": "function", "name": "f"}]), "tools[0].type", "unsupported_value"),
    (body(tools=[_TOOLS[0], {"type": 3, "name": "f"}]), "tools[1].type", "invalid_type"),
    (body(tools=[{"name": "get"}]), "tools[0].input_schema", "missing_required_parameter"),
    (body(tools=[{"input_schema": {}}]), "tools[0].name", "missing_required_parameter"),
    (body(tools=_TOOLS, tool_choice="auto"), "tool_choice", "invalid_type"),
    (body(tools=_TOOLS, tool_choice={"type": "some"}), "tool_choice.type", "invalid_value"),
    (body(tools=_TOOLS, tool_choice={"type": "tool"}), "tool_choice.name", "missing_required_parameter"),
    (
        body(tools=_TOOLS, tool_choice={"type": "auto", "disable_parallel_tool_use": 1}),
        "tool_choice.disable_parallel_tool_use",
        "invalid_type",
    ),
    (body(tool_choice={"type": "any"}), "tool_choice.type", "invalid_value"),
    (body(output_config={"format": {"type": "regex"}}), "output_config.format.type", "invalid_value"),
    (
        body(output_config={"format": {"type": "json_schema"}}),
        "output_config.format.schema",
        "missing_required_parameter",
    ),
]


@pytest.mark.parametrize(
    ("request_body", "param", "code"), REFUSALS, ids=[f"{r[1]}-{r[2]}" for r in REFUSALS]
)
def test_refusals(request_body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        D.to_chat(request_body)
    assert (info.value.param, info.value.code, info.value.status) == (param, code, 400)
    assert info.value.message.startswith(param)


# -- count_request ---------------------------------------------------------------------------------


def test_count_request_needs_no_max_tokens_and_sends_none() -> None:
    chat = count_request({"model": "m", "system": "s", "messages": [USER], "tools": _TOOLS, "stream": "x"})
    assert chat == {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, USER],
        "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
    }


def test_count_request_validates_the_rest() -> None:
    with pytest.raises(InvalidRequestError) as info:
        count_request({"model": "m", "messages": _user({"type": "document"})})
    assert info.value.param == "messages[0].content[0].type"


# -- from_chat ---------------------------------------------------------------------------------------


def completion(
    message: dict[str, Any], finish: str | None = "stop", stop_reason: Any = None, **usage: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "pool-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "stop_reason": stop_reason}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, **usage},
    }


def _call(id_: str | None, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


ANSWERS: list[tuple[str, dict[str, Any], list[dict[str, Any]], str, str | None]] = [
    (
        "text",
        completion({"role": "assistant", "content": "Hello"}),
        [{"type": "text", "text": "Hello"}],
        "end_turn",
        None,
    ),
    ("empty", completion({"role": "assistant", "content": None}), [], "end_turn", None),
    (
        "length",
        completion({"role": "assistant", "content": "Hel"}, "length"),
        [{"type": "text", "text": "Hel"}],
        "max_tokens",
        None,
    ),
    (
        "stop string",
        completion({"role": "assistant", "content": "a"}, "stop", "END"),
        [{"type": "text", "text": "a"}],
        "stop_sequence",
        "END",
    ),
    (
        "stop token id",
        completion({"role": "assistant", "content": "a"}, "stop", 128009),
        [{"type": "text", "text": "a"}],
        "end_turn",
        None,
    ),
    (
        "content filter",
        completion({"role": "assistant", "content": ""}, "content_filter"),
        [],
        "refusal",
        None,
    ),
    (
        "tools",
        completion(
            {
                "role": "assistant",
                "content": "looking",
                "tool_calls": [
                    _call("call_1", "get", '{"q": "x"}'),
                    _call(None, "put", ""),
                    _call("call_3", "bad", "{nope"),
                    _call("c4", "arr", "[1]"),
                ],
            },
            "tool_calls",
        ),
        [
            {"type": "text", "text": "looking"},
            {"type": "tool_use", "id": "call_1", "name": "get", "input": {"q": "x"}},
            {"type": "tool_use", "id": "toolu_abc123_1", "name": "put", "input": {}},
            {"type": "tool_use", "id": "call_3", "name": "bad", "input": {"_raw": "{nope"}},
            {"type": "tool_use", "id": "c4", "name": "arr", "input": {"_raw": "[1]"}},
        ],
        "tool_use",
        None,
    ),
    (
        "forced tool finishing with stop",
        completion(
            {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "get", "{}")]}, "stop"
        ),
        [{"type": "tool_use", "id": "call_1", "name": "get", "input": {}}],
        "tool_use",
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "chat", "content", "stop", "sequence"), ANSWERS, ids=[a[0] for a in ANSWERS]
)
def test_from_chat(
    name: str, chat: dict[str, Any], content: list[dict[str, Any]], stop: str, sequence: str | None
) -> None:
    answer = D.from_chat(chat, body())
    Message.model_validate(answer)
    assert answer["id"] == "msg_abc123" and answer["model"] == "claude-x" and answer["role"] == "assistant"
    assert (answer["content"], answer["stop_reason"], answer["stop_sequence"]) == (content, stop, sequence)
    assert answer == D.from_chat(chat, body())  # deterministic


def test_from_chat_usage_moves_cached_tokens() -> None:
    chat = completion({"role": "assistant", "content": "x"}, prompt_tokens_details={"cached_tokens": 8})
    assert D.from_chat(chat, body())["usage"] == {
        "input_tokens": 4,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 8,
    }
    bare = D.from_chat({"choices": []}, body())
    assert Message.model_validate(bare).usage.input_tokens == 0 and bare["id"] == "msg_0"


# -- error -------------------------------------------------------------------------------------------

STATUSES = [
    (400, "invalid_request_error"),
    (401, "authentication_error"),
    (402, "billing_error"),
    (403, "permission_error"),
    (404, "not_found_error"),
    (405, "invalid_request_error"),
    (408, "timeout_error"),
    (413, "request_too_large"),
    (422, "invalid_request_error"),
    (429, "rate_limit_error"),
    (500, "api_error"),
    (502, "api_error"),
    (503, "overloaded_error"),
    (504, "timeout_error"),
    (529, "overloaded_error"),
]


@pytest.mark.parametrize(("status", "kind"), STATUSES)
def test_error(status: int, kind: str) -> None:
    error = {"message": "it failed", "type": "whatever", "param": None, "code": "c"}
    assert D.error(status, error) == {"type": "error", "error": {"type": kind, "message": "it failed"}}


def test_error_names_the_param() -> None:
    error = {
        "message": "too many",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "invalid_value",
    }
    assert D.error(400, error)["error"]["message"] == "too many (param: max_tokens)"


# -- streams -----------------------------------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    **choice: Any,
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, **choice}]
    out: dict[str, Any] = {
        "id": "chatcmpl-s1",
        "object": "chat.completion.chunk",
        "model": "pool",
        "choices": choices,
    }
    if usage is not None:
        out["usage"] = usage
    return out


def u(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _tc(index: int, arguments: str, id_: str | None = None, name: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        fn["name"] = name
    return {"index": index, "id": id_, "type": "function" if id_ else None, "function": fn}


TOOL_STREAM = [
    chunk({"role": "assistant", "content": ""}, usage=u(10, 0)),
    chunk({"content": "Hel"}, usage=u(10, 1)),
    chunk({"content": "lo"}, usage=u(10, 2)),
    chunk({"tool_calls": [_tc(0, "", "call_a", "get")]}, usage=u(10, 3)),
    chunk({"tool_calls": [_tc(0, '{"city": ')]}, usage=u(10, 4)),
    chunk({"tool_calls": [_tc(0, '"Paris"}')]}, usage=u(10, 5)),
    chunk({"tool_calls": [_tc(1, '{"n": 2}', "call_b", "put")]}, usage=u(10, 6)),
    chunk({}, "tool_calls", usage=u(10, 7)),
    chunk(None, usage=u(10, 7, cached=4)),
]
LENGTH_STREAM = [chunk({"content": "ab"}), chunk({"content": "c"}, "length"), chunk(None, usage=u(3, 2))]
STOP_STREAM = [chunk({"content": "x"}), chunk({}, "stop", stop_reason="END"), chunk(None, usage=u(3, 1))]


def sse(
    chunks: list[dict[str, Any]], failure: dict[str, Any] | None = None, request: dict[str, Any] | None = None
) -> bytes:
    t = D.stream(request or body(stream=True))
    out = b"".join(t.feed(c) for c in chunks)
    return out + (t.fail(failure) if failure is not None else t.close())


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            head, data = frame.split("\n")
            assert head.startswith("event: ") and data.startswith("data: ")
            out.append((head[7:], orjson.loads(data[6:])))
    return out


def test_stream_events_are_the_sdk_types() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    parsed = events(sse(TOOL_STREAM))
    names = [name for name, _ in parsed]
    assert names == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    for name, data in parsed:
        assert data["type"] == name
        if name != "ping":
            adapter.validate_python(data)
    start = parsed[0][1]["message"]
    assert start["usage"]["input_tokens"] == 10 and start["content"] == [] and start["stop_reason"] is None
    assert parsed[-2][1]["usage"] == {
        "input_tokens": 6,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }


def test_stream_close_without_chunks_and_after_done() -> None:
    t = D.stream(body(stream=True))
    names = [n for n, _ in events(t.close())]
    assert names == ["message_start", "ping", "message_delta", "message_stop"]
    assert t.close() == b"" and t.feed(chunk({"content": "late"})) == b""


def test_stream_fail_is_one_error_event() -> None:
    t = D.stream(body(stream=True))
    t.feed(chunk({"content": "x"}))
    error = {"message": "upstream timed out", "type": "api_error", "param": None, "code": "upstream_timeout"}
    assert events(t.fail(error)) == [
        ("error", {"type": "error", "error": {"type": "timeout_error", "message": "upstream timed out"}})
    ]
    assert t.close() == b""


# -- the anthropic SDK end to end --------------------------------------------------------------------


class Pool:
    """The gateway in miniature: the dialect's to_chat, a scripted chat answer, the dialect's answer."""

    def __init__(
        self, answer: dict[str, Any] | None = None, chunks: list[dict[str, Any]] | None = None
    ) -> None:
        self.answer, self.chunks = answer, chunks or []
        self.failure: dict[str, Any] | None = None
        self.status_error: tuple[int, dict[str, Any]] | None = None
        self.chats: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        req = orjson.loads(request.content)
        try:
            if request.url.path.endswith("/count_tokens"):
                chat = count_request(req)
                self.chats.append(chat)
                return httpx2.Response(200, json={"input_tokens": len(orjson.dumps(chat["messages"]))})
            chat = D.to_chat(req)
        except InvalidRequestError as exc:
            return httpx2.Response(400, json=D.error(400, exc.payload()["error"]))
        self.chats.append(chat)
        if self.status_error is not None:
            return httpx2.Response(self.status_error[0], json=D.error(*self.status_error))
        if chat["stream"]:
            raw = sse(self.chunks, self.failure, req)
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)
        assert self.answer is not None
        return httpx2.Response(200, json=D.from_chat(self.answer, req))


def client(pool: Pool) -> anthropic.Anthropic:
    http = httpx2.Client(transport=httpx2.MockTransport(pool))
    return anthropic.Anthropic(base_url="http://t", api_key="k", http_client=http, max_retries=0)


@pytest.fixture
def tool_pool() -> Iterator[Pool]:
    yield Pool(chunks=TOOL_STREAM)


def test_sdk_create() -> None:
    chat = completion(
        {"role": "assistant", "content": "Hi!", "tool_calls": [_call("call_1", "get", '{"q": 1}')]},
        "tool_calls",
    )
    pool = Pool(answer=chat)
    msg = client(pool).messages.create(
        model="claude-x", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
    )
    assert msg.id == "msg_abc123" and msg.stop_reason == "tool_use" and msg.model == "claude-x"
    assert msg.content[0].type == "text" and msg.content[0].text == "Hi!"
    assert (
        msg.content[1].type == "tool_use"
        and msg.content[1].input == {"q": 1}
        and msg.content[1].name == "get"
    )
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (12, 5)
    assert pool.chats[0]["max_tokens"] == 32 and pool.chats[0]["stream"] is False


def test_sdk_create_stream(tool_pool: Pool) -> None:
    with client(tool_pool).messages.create(
        model="claude-x", max_tokens=32, messages=[USER], stream=True
    ) as stream:
        got = list(stream)
    assert [e.type for e in got][:2] == ["message_start", "content_block_start"]  # the SDK skips pings
    texts = [e.delta.text for e in got if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert texts == ["Hel", "lo"]
    final = got[-2]
    assert final.type == "message_delta" and final.delta.stop_reason == "tool_use"
    assert tool_pool.chats[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_sdk_messages_stream(tool_pool: Pool) -> None:
    with client(tool_pool).messages.stream(model="claude-x", max_tokens=32, messages=[USER]) as stream:
        assert list(stream.text_stream) == ["Hel", "lo"]
        msg = stream.get_final_message()
    assert msg.id == "msg_s1" and msg.stop_reason == "tool_use" and msg.stop_sequence is None
    assert [b.type for b in msg.content] == ["text", "tool_use", "tool_use"]
    text, get, put = msg.content
    assert text.type == "text" and text.text == "Hello"
    assert get.type == "tool_use" and (get.id, get.name, get.input) == ("call_a", "get", {"city": "Paris"})
    assert put.type == "tool_use" and (put.id, put.name, put.input) == ("call_b", "put", {"n": 2})
    assert (msg.usage.input_tokens, msg.usage.output_tokens, msg.usage.cache_read_input_tokens) == (6, 7, 4)


@pytest.mark.parametrize(
    ("chunks", "stop", "sequence", "text"),
    [(LENGTH_STREAM, "max_tokens", None, "abc"), (STOP_STREAM, "stop_sequence", "END", "x")],
    ids=["length", "stop_sequence"],
)
def test_sdk_stream_endings(chunks: list[dict[str, Any]], stop: str, sequence: str | None, text: str) -> None:
    pool = Pool(chunks=chunks)
    with client(pool).messages.stream(
        model="claude-x", max_tokens=2, messages=[USER], stop_sequences=["END"]
    ) as s:
        msg = s.get_final_message()
    assert (msg.stop_reason, msg.stop_sequence) == (stop, sequence)
    assert msg.content[0].type == "text" and msg.content[0].text == text
    assert msg.usage.input_tokens == 3  # no continuous usage: message_delta carries it


def test_sdk_stream_failure_raises() -> None:
    pool = Pool(chunks=TOOL_STREAM[:3])
    pool.failure = {
        "message": "the pool dropped the stream",
        "type": "api_error",
        "param": None,
        "code": "upstream_error",
    }
    with pytest.raises(anthropic.APIStatusError) as info:
        with client(pool).messages.stream(model="claude-x", max_tokens=32, messages=[USER]) as s:
            s.get_final_message()
    assert info.value.type == "api_error" and info.value.api_message == "the pool dropped the stream"


def test_sdk_count_tokens() -> None:
    pool = Pool()
    counted = client(pool).messages.count_tokens(model="claude-x", system="s", messages=[USER])
    assert counted.input_tokens == len(orjson.dumps(pool.chats[0]["messages"]))
    assert "max_tokens" not in pool.chats[0]


def test_sdk_tool_round_trip() -> None:
    pool = Pool(answer=completion({"role": "assistant", "content": "It is sunny."}))
    msg = client(pool).messages.create(
        model="claude-x",
        max_tokens=32,
        system="You are a weather bot.",
        tools=[{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "sunny"}],
            },
        ],
    )
    assert (
        msg.content[0].type == "text"
        and msg.content[0].text == "It is sunny."
        and msg.stop_reason == "end_turn"
    )
    chat = pool.chats[0]
    assert chat["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_9", "content": "sunny"},
    ]
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False


def test_sdk_refusal_is_a_bad_request() -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client(Pool()).messages.create(
            model="claude-x",
            max_tokens=8,
            messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}],
        )
    assert info.value.type == "invalid_request_error"
    assert "messages[0].content[0].type" in (info.value.api_message or "")


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (401, anthropic.AuthenticationError),
        (403, anthropic.PermissionDeniedError),
        (404, anthropic.NotFoundError),
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (503, anthropic.InternalServerError),
    ],
)
def test_sdk_errors(status: int, exc: type[anthropic.APIStatusError]) -> None:
    pool = Pool()
    pool.status_error = (status, {"message": "no", "type": "x", "param": None, "code": None})
    with pytest.raises(exc) as info:
        client(pool).messages.create(model="claude-x", max_tokens=8, messages=[USER])
    assert info.value.status_code == status and info.value.api_message == "no"
    assert info.value.type == dict(STATUSES)[status]


def test_stream_drops_reasoning_and_names_an_unnamed_tool_call() -> None:
    chunks = [
        chunk({"reasoning_content": "thinking..."}),
        chunk({"tool_calls": [_tc(0, "{}", None, "get")]}),
        chunk({"content": "done"}, "stop"),
    ]
    parsed = events(sse(chunks))
    starts = [d["content_block"] for n, d in parsed if n == "content_block_start"]
    assert starts == [
        {"type": "tool_use", "id": "toolu_s1_0", "name": "get", "input": {}},
        {"type": "text", "text": ""},
    ]
    assert [d["index"] for n, d in parsed if n == "content_block_stop"] == [0, 1]
    assert parsed[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
