"""The Responses dialect's tools beyond plain functions: namespaces flattened to chat names and named
back, custom (free-form) tools as one string argument, local_shell, and hosted tools dropped or
refused; each checked both ways, unary and streamed, against the openai SDK's models."""

from __future__ import annotations

import re
import time
from typing import Any

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.dialects._responses_stream import _FreeForm, custom_input
from gateway.dialects.responses import (
    HOSTED_TOOLS,
    ResponsesDialect,
    flat_name,
    hosted_tools,
    reject_hosted,
)
from gateway.errors import InvalidRequestError

DIALECT = ResponsesDialect()
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def _fn(name: str, **extra: Any) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": OBJECT, **extra}


def _ns(name: str, *tools: dict[str, Any], description: str | None = "") -> dict[str, Any]:
    namespace: dict[str, Any] = {"type": "namespace", "name": name, "tools": list(tools)}
    return namespace if description is None else {**namespace, "description": description}


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [tool["function"]["name"] for tool in DIALECT.to_chat(_ask(tools=tools))["tools"]]


def _ask(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def _refused(body: dict[str, Any]) -> tuple[str | None, str | None]:
    with pytest.raises(InvalidRequestError) as caught:
        DIALECT.to_chat(body)
    assert caught.value.status == 400
    return caught.value.param, caught.value.code


# -- namespaces -----------------------------------------------------------------------------------


def test_flat_names() -> None:
    assert flat_name("crm", "find") == "crm__find"
    dotted = flat_name("mcp.server", "find")  # a character chat names cannot have
    long = flat_name("n" * 40, "t" * 40)  # longer than 64
    taken = flat_name("crm", "find", {"crm__find"})
    for name, stem in (
        (dotted, "mcp_server__find_"),
        (long, "n" * 40 + "__" + "t" * 13 + "_"),
        (taken, "crm__find_"),
    ):
        assert CHAT_NAME.fullmatch(name) and name.startswith(stem) and len(name) == len(stem) + 8
    assert (
        flat_name("n" * 40, "t" * 40) == long and flat_name("n" * 40, "t" * 41) != long
    )  # by the exact pair
    assert flat_name("crm", "find", {"crm__find", taken}) not in {"crm__find", taken}  # salted until free


def test_a_namespace_is_flattened_around_the_clients_own_names() -> None:
    tools = [
        _ns("a", _fn("b__c"), _fn("x")),  # a__b__c: also the name of the namespace below's member
        _ns("a__b", _fn("c")),
        _fn("a__x"),  # a top-level name is the client's own: the namespace's member moves
        _ns("crm", _fn("find"), description="the CRM"),
    ]
    names = _names(tools)
    assert names[0] == "a__b__c" and names[3] == "a__x" and names[4] == "crm__find"
    assert names[1].startswith("a__x_") and names[2].startswith("a__b__c_") and len(set(names)) == 5
    assert all(CHAT_NAME.fullmatch(name) for name in names) and _names(tools) == names  # deterministic
    find = DIALECT.to_chat(_ask(tools=tools))["tools"][4]["function"]
    assert find == {
        "name": "crm__find",
        "description": "(One of the crm tools: the CRM)",
        "parameters": OBJECT,
    }


def _chat(message: dict[str, Any], finish: str = "tool_calls") -> dict[str, Any]:
    return {
        "id": "chatcmpl-t",
        "object": "chat.completion",
        "created": 1,
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_namespaced_call_is_named_back_and_comes_back_flat() -> None:
    tools = [_ns("a", _fn("b__c")), _ns("a__b", _fn("c"))]
    request = _ask(tools=tools)
    second = _names(tools)[1]
    calls = [_tool_call("a__b__c", "{}", "call_1"), _tool_call(second, '{"q":"x"}', "call_2")]
    output = DIALECT.from_chat(_chat({"content": None, "tool_calls": calls}), request)["output"]
    assert [(o["type"], o["name"], o["namespace"], o["call_id"]) for o in output] == [
        ("function_call", "b__c", "a", "call_1"),
        ("function_call", "c", "a__b", "call_2"),
    ]
    parsed = Response.model_validate(
        DIALECT.from_chat(_chat({"content": None, "tool_calls": calls}), request)
    )
    assert [(c.name, c.namespace) for c in parsed.output if c.type == "function_call"] == [
        ("b__c", "a"),
        ("c", "a__b"),
    ]
    back = _ask(tools=tools, input=[{"role": "user", "content": "go"}, *output])
    assert [c["function"]["name"] for c in DIALECT.to_chat(back)["messages"][1]["tool_calls"]] == [
        "a__b__c",
        second,
    ]
    # a namespace no longer declared is named as it would be
    gone = {"type": "function_call", "call_id": "c9", "name": "find", "namespace": "crm", "arguments": "{}"}
    assert (
        DIALECT.to_chat(_ask(input=[gone]))["messages"][0]["tool_calls"][0]["function"]["name"] == "crm__find"
    )


def test_namespace_refusals() -> None:
    assert _refused(_ask(tools=[_ns("a", _ns("b"))])) == ("tools[0].tools[0].type", "invalid_value")
    assert _refused(_ask(tools=[{"type": "namespace", "name": "a", "description": ""}])) == (
        "tools[0].tools",
        "missing_required_parameter",
    )
    assert _refused(_ask(tools=[{"type": "namespace", "tools": []}])) == (
        "tools[0].name",
        "missing_required_parameter",
    )
    assert _refused(_ask(tools=[{"type": "namespace", "name": "", "tools": []}])) == (
        "tools[0].name",
        "invalid_value",
    )
    assert _refused(_ask(tools=[_ns("a", "x")])) == ("tools[0].tools[0]", "invalid_type")  # type: ignore[arg-type]
    assert _refused(_ask(tools=[_ns("a", _fn("x"), _fn("x"))])) == ("tools[0].tools[1].name", "invalid_value")
    assert _refused(_ask(tools=[_ns("a", _fn("x", parameters=[]))])) == (
        "tools[0].tools[0].parameters",
        "invalid_type",
    )
    custom = {"type": "custom", "name": "x"}
    assert _refused(_ask(tools=[_fn("x"), custom])) == (
        "tools[1].name",
        "invalid_value",
    )  # which one is called?
    assert _names([_fn("x"), _fn("x")]) == ["x", "x"]  # as before: the pool decides


def test_many_colliding_members_cost_linear_time() -> None:
    # every member's plain name is taken by a top-level function: each is salted once
    tools = [_fn(f"a__t{i}") for i in range(3000)] + [_ns("a", *(_fn(f"t{i}") for i in range(3000)))]
    started = time.perf_counter()
    names = _names(tools)
    assert len(set(names)) == 6000 and time.perf_counter() - started < 2


# -- custom tools ---------------------------------------------------------------------------------

PATCH_GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
PATCH = '*** Begin Patch\n*** Update File: a.py\n-x = "é"\n+x = "😀"\n*** End Patch'


def test_a_custom_tool_is_a_function_of_one_string() -> None:
    tools = DIALECT.to_chat(_ask(tools=[APPLY_PATCH, {"type": "custom", "name": "note"}]))["tools"]
    assert tools[0]["function"] == {
        "name": "apply_patch",
        "description": f"Apply a patch.\n\nThe input must match this lark grammar:\n{PATCH_GRAMMAR}",
        "parameters": {
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "the tool's whole input, as free text"}
            },
            "required": ["input"],
            "additionalProperties": False,
        },
    }
    assert tools[1]["function"]["description"] == "" and tools[1]["function"]["name"] == "note"
    bad = {**APPLY_PATCH, "format": {"type": "regex"}}
    assert _refused(_ask(tools=[bad])) == ("tools[0].format.type", "invalid_value")
    no_definition = {**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark"}}
    assert _refused(_ask(tools=[no_definition])) == (
        "tools[0].format.definition",
        "missing_required_parameter",
    )
    choice = DIALECT.to_chat(_ask(tools=[APPLY_PATCH], tool_choice={"type": "custom", "name": "apply_patch"}))
    assert choice["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}


def test_a_custom_call_goes_out_and_comes_back() -> None:
    request = _ask(tools=[APPLY_PATCH, _ns("fs", {"type": "custom", "name": "write"})])
    arguments = orjson.dumps({"input": PATCH}).decode()
    calls = [_tool_call("apply_patch", arguments), _tool_call("fs__write", '{"input":"hello"}', "call_2")]
    body = DIALECT.from_chat(_chat({"content": None, "tool_calls": calls}), request)
    assert body["output"] == [
        {
            "id": "ctc_t_0",
            "type": "custom_tool_call",
            "call_id": "call_1",
            "name": "apply_patch",
            "input": PATCH,
            "status": "completed",
        },
        {
            "id": "ctc_t_1",
            "type": "custom_tool_call",
            "call_id": "call_2",
            "name": "write",
            "input": "hello",
            "status": "completed",
            "namespace": "fs",
        },
    ]
    parsed = Response.model_validate(body)
    assert [(o.type, getattr(o, "input", None)) for o in parsed.output] == [
        ("custom_tool_call", PATCH),
        ("custom_tool_call", "hello"),
    ]
    items = [{k: v for k, v in o.items() if k != "status"} for o in body["output"]]
    outputs = [
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done!"},
        {
            "type": "custom_tool_call_output",
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "ok"}],
        },
    ]
    chat = DIALECT.to_chat({**request, "input": [{"role": "user", "content": "patch it"}, *items, *outputs]})
    assert chat["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "Done!"},
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
    ]
    assert _refused(_ask(input=[{"type": "custom_tool_call", "call_id": "c", "name": "x"}])) == (
        "input[0].input",
        "missing_required_parameter",
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"input": "a\\nb"}', "a\nb"),
        ('{"input":"\\u00e9\\ud83d\\ude00\\"\\\\/\\t"}', 'é😀"\\/\t'),
        ('{"input": "x\\q"}', "x\\q"),  # not JSON's escape: kept as written
        ('{"input": "\\ud83d"}', "\ufffd"),  # half a surrogate pair
        ('{"input": "\\ud83d\\u0041\\ude00"}', "\ufffdA\ufffd"),
        ('{"input": "cut sho', "cut sho"),  # the answer was cut: what came
        ('{"other": 1, "input": "late"}', "late"),  # another shape: parsed whole
        ('{"input": 3}', '{"input": 3}'),
        ("not json", "not json"),
        ("", ""),
    ],
)
def test_a_custom_input_is_decoded_in_any_fragments(arguments: str, expected: str) -> None:
    assert custom_input(arguments) == expected
    for size in (1, 2, 3, 5):
        free = _FreeForm()
        streamed = "".join(free.feed(arguments[i : i + size]) for i in range(0, len(arguments), size))
        assert free.finish() == expected
        assert streamed == (expected if free.decoding else "")


def test_a_custom_input_is_what_json_says_it_is() -> None:
    texts = ["", "plain", "".join(map(chr, range(0x20))), 'q"uo\\te/', "é😀\u2028\x7f", "\\u0041", "x" * 5000]
    for text in texts:
        for arguments in (
            orjson.dumps({"input": text}).decode(),
            f'{{ "input" :\n "{orjson.dumps(text).decode()[1:]} }}',
        ):
            free = _FreeForm()
            streamed = "".join(free.feed(arguments[i : i + 3]) for i in range(0, len(arguments), 3))
            assert streamed == free.finish() == custom_input(arguments) == text


def _parse(data: bytes) -> list[Any]:
    events = []
    for frame in data.decode().split("\n\n")[:-1]:
        _, line = frame.split("\n")
        events.append(EVENTS.validate_python(orjson.loads(line.removeprefix("data: "))))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    return events


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-t",
        "object": "chat.completion.chunk",
        "created": 1,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _calls(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        call.update(id=f"call_{index}", type="function", function={"name": name, "arguments": arguments})
    return {"tool_calls": [call]}


def _stream(request: dict[str, Any], chunks: list[dict[str, Any]]) -> list[Any]:
    translator = DIALECT.stream(request)
    return _parse(b"".join(translator.feed(chunk) for chunk in chunks) + translator.close())


def test_a_custom_call_streams_its_input() -> None:
    arguments = orjson.dumps({"input": PATCH}).decode()
    pieces = [arguments[i : i + 7] for i in range(0, len(arguments), 7)]  # splits escapes and pairs
    chunks = [_chunk(_calls(0, pieces[0], "apply_patch"))] + [_chunk(_calls(0, p)) for p in pieces[1:]]
    chunks += [_chunk(_calls(1, '{"q":"x"}', "fs__find")), _chunk({}, "tool_calls")]
    request = _ask(tools=[APPLY_PATCH, _ns("fs", _fn("find"))], stream=True)
    events = _stream(request, chunks)
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == PATCH and len(deltas) > 5 and all(deltas)
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(i.type, i.name) for i in added] == [
        ("custom_tool_call", "apply_patch"),
        ("function_call", "find"),
    ]
    done = {e.type: e for e in events if e.type.endswith(".done")}
    assert done["response.custom_tool_call_input.done"].input == PATCH
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert [(o.type, getattr(o, "namespace", None)) for o in final.output] == [
        ("custom_tool_call", None),
        ("function_call", "fs"),
    ]
    assert final.output[0].input == PATCH and final.output[1].arguments == '{"q":"x"}'


def test_a_custom_call_of_another_shape_streams_its_input_at_the_end() -> None:
    chunks = [
        _chunk(_calls(0, '{"note": 1, ', "apply_patch")),
        _chunk(_calls(0, '"input": "ab"}')),
        _chunk({}, "stop"),
    ]
    events = _stream(_ask(tools=[APPLY_PATCH], stream=True), chunks)
    kinds = [e.type for e in events]
    assert kinds[2:] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[3].delta == "ab" and events[-1].response.output[0].input == "ab"


# -- local_shell ----------------------------------------------------------------------------------


def test_local_shell_is_a_function_and_its_calls_exec_actions() -> None:
    request = _ask(tools=[{"type": "local_shell"}])
    function = DIALECT.to_chat(request)["tools"][0]["function"]
    assert function["name"] == "local_shell" and function["parameters"]["required"] == ["command"]
    calls = [
        _tool_call("local_shell", '{"command": ["ls", "-la"], "workdir": "/src", "timeout_ms": 5000}'),
        _tool_call("local_shell", '{"command": "ls | wc -l"}', "call_2"),
        _tool_call("local_shell", "oops", "call_3"),
    ]
    output = DIALECT.from_chat(_chat({"content": None, "tool_calls": calls}), request)["output"]
    assert [o["action"] for o in output] == [
        {
            "type": "exec",
            "command": ["ls", "-la"],
            "env": {},
            "working_directory": "/src",
            "timeout_ms": 5000,
        },
        {"type": "exec", "command": ["bash", "-lc", "ls | wc -l"], "env": {}},
        {"type": "exec", "command": [], "env": {}},  # the client says it cannot run that
    ]
    assert {o["type"] for o in output} == {"local_shell_call"} and output[0]["id"] == "lsc_t_0"
    Response.model_validate(DIALECT.from_chat(_chat({"content": None, "tool_calls": calls}), request))
    back = [
        {
            "type": "local_shell_call",
            "id": "lsc_1",
            "call_id": "call_1",
            "status": "completed",
            "action": output[0]["action"],
        },
        {"type": "local_shell_call_output", "id": "call_1", "output": "total 0"},
    ]
    chat = DIALECT.to_chat({**request, "input": back})
    assert chat["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    **calls[0],
                    "function": {
                        "name": "local_shell",
                        "arguments": '{"command":["ls","-la"],"workdir":"/src","timeout_ms":5000}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "total 0"},
    ]
    bad = {**back[0], "action": {"type": "exec", "command": "ls"}}
    assert _refused(_ask(input=[bad])) == ("input[0].action.command", "invalid_type")


def test_a_streamed_local_shell_call_is_announced_then_done_with_its_action() -> None:
    chunks = [
        _chunk(_calls(0, '{"command":', "local_shell")),
        _chunk(_calls(0, '["pwd"]}')),
        _chunk({}, "tool_calls"),
    ]
    events = _stream(_ask(tools=[{"type": "local_shell"}], stream=True), chunks)
    assert [e.type for e in events][2:] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2].item.action.command == [] and events[3].item.action.command == ["pwd"]


# -- hosted tools ---------------------------------------------------------------------------------


def test_hosted_tools_are_dropped_and_listed() -> None:
    tools = [
        {"type": "web_search", "external_web_access": False},
        _fn("find"),
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "web_search"},
        {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example"},
    ]
    body = _ask(tools=tools, tool_choice={"type": "file_search"})
    chat = DIALECT.to_chat(body)
    assert [t["function"]["name"] for t in chat["tools"]] == ["find"] and chat["tool_choice"] == "auto"
    assert hosted_tools(body) == ["web_search", "file_search", "mcp"]
    error = reject_hosted(hosted_tools(body), body)
    assert (error.status, error.type, error.param, error.code) == (
        400,
        "invalid_request_error",
        "tools[0].type",
        "unsupported_value",
    )
    assert error.message.startswith("Hosted tools 'web_search', 'file_search', 'mcp' are not available")
    one = reject_hosted(["mcp"])
    assert one.param == "tools" and one.message.startswith("Hosted tool 'mcp' is not")  # no body: no index
    # all tools hosted: nothing to choose from, so no tool_choice (a forced choice would fail at the pool)
    only = DIALECT.to_chat(_ask(tools=[{"type": "web_search_preview"}], tool_choice="required"))
    assert "tools" not in only and "tool_choice" not in only
    assert DIALECT.to_chat(_ask(tool_choice="required"))["tool_choice"] == "required"  # as before


@pytest.mark.parametrize(
    "body", [None, [], {"tools": "x"}, {"tools": [None, {"type": 3}, {"type": "function"}]}]
)
def test_hosted_tools_of_a_malformed_body_is_empty(body: object) -> None:
    assert hosted_tools(body) == []


def test_every_hosted_type_is_dropped() -> None:
    body = _ask(tools=[{"type": kind} for kind in sorted(HOSTED_TOOLS)])
    assert "tools" not in DIALECT.to_chat(body) and hosted_tools(body) == sorted(HOSTED_TOOLS)
