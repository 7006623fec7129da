"""gateway.dialects.responses: Responses <-> Chat Completions, checked against the openai SDK's own
models and stream accumulator, and an openai-agents function-tool round trip."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.dialects import Dialect
from gateway.dialects.responses import ResponsesDialect
from gateway.errors import InvalidRequestError

DIALECT = ResponsesDialect()
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {
    "type": "function",
    "name": "weather",
    "description": "Weather",
    "parameters": WEATHER,
    "strict": True,
}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "weather", "description": "Weather", "parameters": WEATHER, "strict": True},
}
CALL = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'}
CHAT_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
}


def _m(role: str, content: Any) -> dict[str, Any]:
    return {"role": role, "content": content}


def test_is_a_dialect() -> None:
    dialect: Dialect = DIALECT
    assert dialect.name == "responses"


# -- to_chat --------------------------------------------------------------------------------------

TO_CHAT: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("string input", {"model": "m", "input": "hi"}, {"model": "m", "messages": [_m("user", "hi")]}),
    (
        "instructions, easy messages, developer -> system",
        {
            "model": "m",
            "instructions": "be brief",
            "input": [_m("developer", "rules"), _m("user", "q"), {"type": "message", **_m("assistant", "a")}],
        },
        {
            "model": "m",
            "messages": [
                _m("system", "be brief"),
                _m("system", "rules"),
                _m("user", "q"),
                _m("assistant", "a"),
            ],
        },
    ),
    (
        "content parts: one text part is a string, several stay parts, an image",
        {
            "model": "m",
            "input": [
                _m("user", [{"type": "input_text", "text": "one"}]),
                _m("user", [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]),
                _m(
                    "user",
                    [
                        {"type": "input_text", "text": "see"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                    ],
                ),
                {
                    "id": "msg_1",
                    "type": "message",
                    "status": "completed",
                    **_m("assistant", [{"type": "output_text", "text": "ok", "annotations": []}]),
                },
            ],
        },
        {
            "model": "m",
            "messages": [
                _m("user", "one"),
                _m("user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
                _m(
                    "user",
                    [
                        {"type": "text", "text": "see"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                        },
                    ],
                ),
                _m("assistant", "ok"),
            ],
        },
    ),
    (
        "function calls merge (with the assistant text before them); outputs become tool messages",
        {
            "model": "m",
            "input": [
                _m("user", "weather?"),
                {"type": "reasoning", "id": "rs_1", "summary": []},
                _m("assistant", "checking"),
                CALL,
                {**CALL, "call_id": "call_2"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "rain"}],
                },
                CALL,
            ],
        },
        {
            "model": "m",
            "messages": [
                _m("user", "weather?"),
                {
                    "role": "assistant",
                    "content": "checking",
                    "tool_calls": [CHAT_CALL, {**CHAT_CALL, "id": "call_2"}],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
                {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
            ],
        },
    ),
    (
        "sampling copied; stateless extras and unknown keys dropped",
        {
            "model": "m",
            "input": "hi",
            "max_output_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "user": "u1",
            "parallel_tool_calls": False,
            "seed": 7,
            "metadata": {"k": "v"},
            "store": True,
            "reasoning": {"effort": "low"},
            "truncation": "disabled",
            "include": ["message.output_text.logprobs"],
            "service_tier": "auto",
            "prompt_cache_key": "p",
            "safety_identifier": "s",
            "stream_options": {"include_obfuscation": False},
            "previous_response_id": None,
            "background": False,
            "some_future_key": 1,
        },
        {
            "model": "m",
            "messages": [_m("user", "hi")],
            "max_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "user": "u1",
            "parallel_tool_calls": False,
            "seed": 7,
            "prompt_cache_key": "p",
            "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": True},
        },
    ),
    (
        "tools, tool_choice function, json_schema, stream",
        {
            "model": "m",
            "input": "hi",
            "tools": [TOOL],
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}},
            "stream": True,
        },
        {
            "model": "m",
            "messages": [_m("user", "hi")],
            "tools": [CHAT_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "w", "schema": WEATHER, "strict": True},
            },
            "stream": True,
            "stream_options": STREAM_OPTIONS,
        },
    ),
    (
        "tool_choice string, json_object, text format, stream false",
        {
            "model": "m",
            "input": "hi",
            "tool_choice": "required",
            "text": {"format": {"type": "json_object"}},
            "stream": False,
        },
        {
            "model": "m",
            "messages": [_m("user", "hi")],
            "tool_choice": "required",
            "response_format": {"type": "json_object"},
        },
    ),
    (
        "text format text, empty tools",
        {"model": "m", "input": "hi", "tools": [], "text": {"format": {"type": "text"}, "verbosity": "low"}},
        {"model": "m", "messages": [_m("user", "hi")]},
    ),
]


@pytest.mark.parametrize(("body", "chat"), [c[1:] for c in TO_CHAT], ids=[c[0] for c in TO_CHAT])
def test_to_chat(body: dict[str, Any], chat: dict[str, Any]) -> None:
    assert DIALECT.to_chat(body) == chat


MISSING, TYPE, VALUE, UNSUPPORTED = (
    "missing_required_parameter",
    "invalid_type",
    "invalid_value",
    "unsupported_parameter",
)


def _in(*items: Any) -> dict[str, Any]:
    return {"model": "m", "input": list(items)}


def _with(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def _user(*parts: dict[str, Any]) -> dict[str, Any]:
    return _in(_m("user", list(parts)))


REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"input": "hi"}, "model", MISSING),
    ({"model": 3, "input": "hi"}, "model", TYPE),
    ({"model": "m"}, "input", MISSING),
    ({"model": "m", "input": 5}, "input", TYPE),
    (_in(), "input", VALUE),
    (_in("hi"), "input[0]", TYPE),
    (_with(instructions=["x"]), "instructions", TYPE),
    (_in({"content": "x"}), "input[0].type", MISSING),
    (_in({"type": "web_search_call"}), "input[0].type", VALUE),
    (_in(_m("user", "a"), {"type": "item_reference", "id": "x"}), "input[1].type", VALUE),
    (_in(_m("tool", "x")), "input[0].role", VALUE),
    (_in({"role": "user"}), "input[0].content", MISSING),
    (_in(_m("user", 3)), "input[0].content", TYPE),
    (_user({"type": "input_file", "file_id": "f"}), "input[0].content[0].type", VALUE),
    (_user({"type": "input_image", "file_id": "f"}), "input[0].content[0].file_id", UNSUPPORTED),
    (_in(_m("assistant", [{"type": "input_image", "image_url": "u"}])), "input[0].content[0].type", VALUE),
    (_user({"type": "input_text"}), "input[0].content[0].text", MISSING),
    (_in({**CALL, "name": None}), "input[0].name", MISSING),
    (_in({**CALL, "arguments": {}}), "input[0].arguments", TYPE),
    (_in({"type": "function_call_output", "call_id": "c"}), "input[0].output", MISSING),
    (_with(previous_response_id="resp_1"), "previous_response_id", UNSUPPORTED),
    (_with(background=True), "background", UNSUPPORTED),
    (_with(conversation="conv_1"), "conversation", UNSUPPORTED),
    (_with(prompt={"id": "pmpt_1"}), "prompt", UNSUPPORTED),
    (_with(max_output_tokens="9"), "max_output_tokens", TYPE),
    (_with(max_output_tokens=0), "max_output_tokens", VALUE),
    (_with(temperature="hot"), "temperature", TYPE),
    (_with(temperature=3), "temperature", VALUE),
    (_with(top_p=1.5), "top_p", VALUE),
    (_with(parallel_tool_calls="yes"), "parallel_tool_calls", TYPE),
    (_with(seed=1.5), "seed", TYPE),
    (_with(metadata="x"), "metadata", TYPE),
    (_with(stream="yes"), "stream", TYPE),
    (_with(tools={}), "tools", TYPE),
    (_with(tools=[TOOL, {"type": "shell"}]), "tools[1].type", UNSUPPORTED),
    (_with(tools=[{"type": "apply_patch"}]), "tools[0].type", UNSUPPORTED),
    (_with(tools=[{"type": "retrieval"}]), "tools[0].type", UNSUPPORTED),
    (_with(tools=[{"type": "function"}]), "tools[0].name", MISSING),
    (_with(tools=[{**TOOL, "parameters": []}]), "tools[0].parameters", TYPE),
    (_with(tool_choice="sometimes"), "tool_choice", VALUE),
    (_with(tool_choice={"type": "allowed_tools", "mode": "auto"}), "tool_choice.type", UNSUPPORTED),
    (_with(tool_choice={"type": "function"}), "tool_choice.name", MISSING),
    (_with(text="json"), "text", TYPE),
    (_with(text={"format": {"type": "yaml"}}), "text.format.type", VALUE),
    (_with(text={"format": {"type": "json_schema", "name": "w"}}), "text.format.schema", MISSING),
    (_with(text={"format": {"type": "json_schema", "schema": {}}}), "text.format.name", MISSING),
]


@pytest.mark.parametrize(("body", "param", "code"), REFUSED, ids=[f"{r[1]}-{r[2]}" for r in REFUSED])
def test_to_chat_refuses(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        DIALECT.to_chat(body)
    assert (caught.value.param, caught.value.code, caught.value.status) == (param, code, 400)


def test_previous_response_id_says_why() -> None:
    with pytest.raises(InvalidRequestError, match="stores no responses"):
        DIALECT.to_chat({"model": "m", "input": "hi", "previous_response_id": "resp_1"})


# -- from_chat ------------------------------------------------------------------------------------

USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 5,
    "total_tokens": 17,
    "prompt_tokens_details": {"cached_tokens": 8},
}
RESPONSES_USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 17,
}


def _chat(
    message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "pool-model",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _text_item(text: str, status: str = "completed", index: int = 0) -> dict[str, Any]:
    return {
        "id": f"msg_abc_{index}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _call_item(index: int, call_id: str = "call_1", status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"fc_abc_{index}",
        "type": "function_call",
        "call_id": call_id,
        "name": "weather",
        "arguments": '{"city":"Paris"}',
        "status": status,
    }


FROM_CHAT: list[tuple[str, dict[str, Any], str, Any, list[dict[str, Any]]]] = [
    ("text", _chat({"content": "Hello"}), "completed", None, [_text_item("Hello")]),
    (
        "tool calls",
        _chat({"content": None, "tool_calls": [CHAT_CALL, {**CHAT_CALL, "id": "call_2"}]}, "tool_calls"),
        "completed",
        None,
        [_call_item(0), _call_item(1, "call_2")],
    ),
    (
        "text then a tool call",
        _chat({"content": "Let me check.", "tool_calls": [CHAT_CALL]}, "tool_calls"),
        "completed",
        None,
        [_text_item("Let me check."), _call_item(1)],
    ),
    (
        "length is incomplete",
        _chat({"content": "Once upon"}, "length"),
        "incomplete",
        {"reason": "max_output_tokens"},
        [_text_item("Once upon", "incomplete")],
    ),
    ("empty text, no items", _chat({"content": ""}), "completed", None, []),
]


@pytest.mark.parametrize(
    ("chat", "status", "details", "output"), [c[1:] for c in FROM_CHAT], ids=[c[0] for c in FROM_CHAT]
)
def test_from_chat(chat: dict[str, Any], status: str, details: Any, output: list[dict[str, Any]]) -> None:
    request = {
        "model": "alias",
        "input": "hi",
        "tools": [TOOL],
        "instructions": "be brief",
        "max_output_tokens": 9,
    }
    body = DIALECT.from_chat(chat, request)
    assert body["output"] == output
    assert (body["id"], body["status"], body["incomplete_details"]) == ("resp_abc", status, details)
    assert (body["model"], body["created_at"], body["store"], body["error"]) == (
        "alias",
        1700000000,
        False,
        None,
    )
    assert (body["instructions"], body["max_output_tokens"], body["tools"]) == ("be brief", 9, [TOOL])
    parsed = Response.model_validate(body)
    text = "".join(c["text"] for item in output if item["type"] == "message" for c in item["content"])
    assert parsed.output_text == text
    assert DIALECT.from_chat(chat, request) == body  # deterministic


def test_from_chat_usage_and_echoes() -> None:
    request = {
        "model": "alias",
        "input": "hi",
        "temperature": 0.2,
        "tool_choice": "none",
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "text": {"format": {"type": "json_object"}},
    }
    body = DIALECT.from_chat(_chat({"content": "{}"}, usage=USAGE), request)
    assert body["usage"] == RESPONSES_USAGE
    assert (body["temperature"], body["tool_choice"], body["parallel_tool_calls"]) == (0.2, "none", False)
    assert (body["metadata"], body["text"]) == ({"k": "v"}, {"format": {"type": "json_object"}})
    Response.model_validate(body)
    defaults = DIALECT.from_chat(_chat({"content": "x"}), {"model": "alias", "input": "hi"})
    assert (defaults["tool_choice"], defaults["parallel_tool_calls"], defaults["tools"]) == ("auto", True, [])
    assert defaults["text"] == {"format": {"type": "text"}} and defaults["metadata"] == {}


def test_error_is_the_openai_body() -> None:
    error = {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}
    assert DIALECT.error(429, error) == {"error": error}


# -- stream ---------------------------------------------------------------------------------------


def _chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    chunk = {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "choices": choices,
    }
    return {**chunk, "usage": usage} if usage else chunk


def _tool_delta(index: int, call_id: str | None, arguments: str) -> dict[str, Any]:
    function = {"name": "weather", "arguments": arguments} if call_id else {"arguments": arguments}
    call = (
        {"index": index, "id": call_id, "type": "function", "function": function}
        if call_id
        else {"index": index, "function": function}
    )
    return {"tool_calls": [call]}


def _run(request: dict[str, Any], chunks: list[dict[str, Any]], error: dict[str, Any] | None = None) -> bytes:
    translator = DIALECT.stream(request)
    out = b"".join(translator.feed(chunk) for chunk in chunks)
    out += translator.fail(error) if error else translator.close()
    assert translator.feed(chunks[0] if chunks else _chunk({})) == translator.close() == b""  # ended
    return out


def _parse(data: bytes) -> list[Any]:
    """The SSE bytes as the SDK's event models, checking the framing and the sequence numbers."""
    events = []
    for frame in data.decode().split("\n\n")[:-1]:
        head, body = frame.split("\n")
        assert head.startswith("event: ") and body.startswith("data: ")
        payload = orjson.loads(body.removeprefix("data: "))
        assert payload["type"] == head.removeprefix("event: ")
        events.append(EVENTS.validate_python(payload))
    assert data.endswith(b"\n\n")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    return events


CONTINUOUS = {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}
TEXT_CHUNKS = [
    _chunk({"role": "assistant", "content": ""}, usage=CONTINUOUS),
    _chunk({"content": "Hel"}, usage=CONTINUOUS),
    _chunk({"content": "lo"}, usage=CONTINUOUS),
    _chunk({}, "stop", usage=CONTINUOUS),
    _chunk(usage=USAGE),  # the usage-only chunk
]
TOOL_CHUNKS = [
    _chunk({"role": "assistant", "content": "Checking."}),
    _chunk(_tool_delta(0, "call_1", "")),
    _chunk(_tool_delta(0, None, '{"city":')),
    _chunk(_tool_delta(1, "call_2", '{"city":"Paris"}')),
    _chunk(_tool_delta(0, None, '"Paris"}')),
    _chunk({}, "tool_calls", usage=USAGE),
]
OPENING = ["response.created", "response.in_progress"]
TEXT_OPEN = ["response.output_item.added", "response.content_part.added"]
TEXT_DONE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
CALL_DONE = ["response.function_call_arguments.done", "response.output_item.done"]
ARGS = "response.function_call_arguments.delta"
TEXT_DELTA = "response.output_text.delta"

STREAMS: list[tuple[str, list[dict[str, Any]], list[str], str, list[dict[str, Any]]]] = [
    (
        "text",
        TEXT_CHUNKS,
        [*OPENING, *TEXT_OPEN, TEXT_DELTA, TEXT_DELTA, *TEXT_DONE, "response.completed"],
        "completed",
        [_text_item("Hello")],
    ),
    (
        "text, then two tool calls (one interleaved)",
        TOOL_CHUNKS,
        [
            *OPENING,
            *TEXT_OPEN,
            TEXT_DELTA,
            *TEXT_DONE,
            "response.output_item.added",
            ARGS,
            "response.output_item.added",
            ARGS,
            ARGS,
            *CALL_DONE,
            *CALL_DONE,
            "response.completed",
        ],
        "completed",
        [_text_item("Checking."), _call_item(1), _call_item(2, "call_2")],
    ),  # fmt: skip
    (
        "length",
        [_chunk({"content": "Once"}), _chunk({"content": " upon"}, "length", usage=USAGE)],
        [*OPENING, *TEXT_OPEN, TEXT_DELTA, TEXT_DELTA, *TEXT_DONE, "response.incomplete"],
        "incomplete",
        [_text_item("Once upon", "incomplete")],
    ),
    ("nothing at all", [], [*OPENING, "response.completed"], "completed", []),
]


@pytest.mark.parametrize(
    ("chunks", "types", "status", "output"), [s[1:] for s in STREAMS], ids=[s[0] for s in STREAMS]
)
def test_stream(
    chunks: list[dict[str, Any]], types: list[str], status: str, output: list[dict[str, Any]]
) -> None:
    request = {"model": "alias", "input": "hi", "stream": True, "tools": [TOOL]}
    events = _parse(_run(request, chunks))
    assert [event.type for event in events] == types
    created, last = events[0].response, events[-1].response
    assert (created.status, created.output, created.model, created.usage) == (
        "in_progress",
        [],
        "alias",
        None,
    )
    assert created.id == last.id
    assert (last.status, last.model_dump(mode="json", exclude_none=True)["output"]) == (status, output)
    assert (last.usage.model_dump(exclude_none=True) if last.usage else None) == (
        RESPONSES_USAGE if chunks else None
    )
    if status == "incomplete":
        assert last.incomplete_details.reason == "max_output_tokens"
    done = {event.output_index: event.item for event in events if event.type == "response.output_item.done"}
    assert [item.model_dump(mode="json", exclude_none=True) for _, item in sorted(done.items())] == output
    deltas = [
        "".join(e.delta for e in events if e.type in (TEXT_DELTA, ARGS) and e.output_index == i) for i in done
    ]
    assert deltas == [
        item["content"][0]["text"] if "content" in item else item["arguments"] for item in output
    ]
    if chunks:
        assert _run(request, chunks) == _run(request, chunks)  # deterministic


@pytest.mark.parametrize(
    ("chunks", "code", "expected_code", "output"),
    [
        ([_chunk({"content": "Hel"})], "upstream_error", "server_error", [_text_item("Hel", "incomplete")]),
        ([], "rate_limit_exceeded", "rate_limit_exceeded", []),
    ],
)
def test_stream_failure(
    chunks: list[dict[str, Any]], code: str, expected_code: str, output: list[Any]
) -> None:
    error = {"message": "the pool went away", "type": "api_error", "param": None, "code": code}
    events = _parse(_run({"model": "alias", "input": "hi"}, chunks, error))
    assert events[-1].type == "response.failed" and events[0].type == "response.created"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.message) == (expected_code, "the pool went away")
    assert failed.model_dump(mode="json", exclude_none=True)["output"] == output


# -- the SDKs, over an httpx MockTransport that answers with the dialect ---------------------------

Turn = tuple[dict[str, Any], str]  # a chat message and its finish_reason


def _chunks_of(message: dict[str, Any], finish: str) -> list[dict[str, Any]]:
    text = message.get("content") or ""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"content": text[i : i + 4]}, usage=CONTINUOUS) for i in range(0, len(text), 4)]
    for n, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        chunks += [
            _chunk(_tool_delta(n, call["id"], arguments[:5])),
            _chunk(_tool_delta(n, None, arguments[5:])),
        ]
    return [*chunks, _chunk({}, finish), _chunk(usage=USAGE)]


def _transport(turns: list[Turn], seen: list[dict[str, Any]]) -> httpx.MockTransport:
    script: Iterator[Turn] = iter(turns)

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/responses"
        body = orjson.loads(request.content)
        seen.append(DIALECT.to_chat(body))
        message, finish = next(script)
        if body.get("stream"):
            sse = _run(body, _chunks_of(message, finish))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
        return httpx.Response(200, json=DIALECT.from_chat(_chat(message, finish, USAGE), body))

    return httpx.MockTransport(handle)


def _client(turns: list[Turn], seen: list[dict[str, Any]]) -> openai.OpenAI:
    http = httpx.Client(transport=_transport(turns, seen))
    return openai.OpenAI(base_url="http://gateway.test/v1", api_key="k", http_client=http, max_retries=0)


def test_sdk_unary_and_raw_stream() -> None:
    seen: list[dict[str, Any]] = []
    client = _client([({"content": "Hello there"}, "stop"), ({"content": "Hello there"}, "stop")], seen)
    response = client.responses.create(
        model="alias", input="hi", instructions="be brief", max_output_tokens=20
    )
    assert (response.output_text, response.status, response.model) == ("Hello there", "completed", "alias")
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 8
    events = list(client.responses.create(model="alias", input="hi", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello there"
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Hello there"
    assert seen[0]["messages"][0] == {"role": "system", "content": "be brief"} and seen[0]["max_tokens"] == 20
    assert seen[1]["stream_options"] == STREAM_OPTIONS


def test_sdk_stream_helper_accumulates_tool_calls() -> None:
    turns: list[Turn] = [
        ({"content": "Checking.", "tool_calls": [CHAT_CALL, {**CHAT_CALL, "id": "call_2"}]}, "tool_calls")
    ]
    client = _client(turns, [])
    with client.responses.stream(model="alias", input="weather?", tools=[TOOL]) as stream:
        snapshots = [e.snapshot for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert snapshots == ['{"cit', '{"city":"Paris"}', '{"cit', '{"city":"Paris"}']
    assert final.output_text == "Checking." and final.usage is not None and final.usage.total_tokens == 17
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("call_1", "weather", '{"city":"Paris"}')
    ] * 1 + [("call_2", "weather", '{"city":"Paris"}')]
    assert calls[0].parsed_arguments == {"city": "Paris"}


@pytest.mark.parametrize("streamed", [False, True])
async def test_agents_function_tool_round_trip(streamed: bool) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    seen: list[dict[str, Any]] = []
    turns: list[Turn] = [
        ({"content": None, "tool_calls": [CHAT_CALL]}, "tool_calls"),
        ({"content": "Sunny."}, "stop"),
    ]
    http = httpx.AsyncClient(transport=_transport(turns, seen))
    client = openai.AsyncOpenAI(
        base_url="http://gateway.test/v1", api_key="k", http_client=http, max_retries=0
    )
    model = agents.OpenAIResponsesModel(model="alias", openai_client=client)
    agent = agents.Agent(name="a", instructions="be brief", tools=[weather], model=model)
    if streamed:
        result = agents.Runner.run_streamed(agent, "weather in Paris?")
        _ = [event async for event in result.stream_events()]
    else:
        result = await agents.Runner.run(agent, "weather in Paris?")
    assert result.final_output == "Sunny."
    assert seen[1]["messages"][-2:] == [
        {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Paris"},
    ]
    assert result.context_wrapper.usage.input_tokens == 24 and result.context_wrapper.usage.requests == 2


def test_langchain_responses_api() -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    turns: list[Turn] = [({"content": "Hi!"}, "stop"), ({"content": "Hi again!"}, "stop")]
    http = httpx.Client(transport=_transport(turns, []))
    chat = langchain_openai.ChatOpenAI(
        model="alias",
        base_url="http://gateway.test/v1",
        api_key="k",
        http_client=http,
        use_responses_api=True,
    )
    message = chat.invoke("hello")
    assert message.text == "Hi!" and message.usage_metadata["input_tokens"] == 12
    chunks = list(chat.stream("hello"))
    assert "".join(chunk.text for chunk in chunks) == "Hi again!"
    assert sum((c.usage_metadata or {}).get("total_tokens", 0) for c in chunks) == 17
