"""Claude Code's Messages requests through the dialect (issue 40): its captured first request, `system`-role
messages, `thinking` (validated, mapped to the pool's reasoning controls, answered as signed thinking blocks
and checked when sent back), `cache_control` as a prompt-cache key, Anthropic-defined tools dropped and
deferred tools held back, and the fields accepted for type."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import TypeAdapter

from gateway.dialects.messages import MessagesDialect, count_request, dropped_tools
from gateway.dialects.seal import Sealer
from gateway.errors import InvalidRequestError

SEALER = Sealer(b"s" * 32)
D = MessagesDialect(sealer=SEALER)
USER = {"role": "user", "content": "hi"}
EPHEMERAL = {"type": "ephemeral"}
TOOL = {"name": "get", "input_schema": {"type": "object"}}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 2048, "messages": [USER], **extra}


def refused(request: dict[str, Any], param: str, code: str, *, dialect: MessagesDialect = D) -> str:
    with pytest.raises(InvalidRequestError) as info:
        dialect.to_chat(request)
    assert (info.value.param, info.value.code, info.value.status) == (param, code, 400)
    assert info.value.type == "invalid_request_error" and info.value.message.startswith(param)
    return info.value.message


# -- Claude Code 2.1.328's first request, as captured (structure only; texts filled in) -----------------

_FILLER = (
    "You are an interactive agent that helps users with software engineering tasks. Use the tools "
    "available to you to read, edit and run code; keep answers short and to the point. "
)
_PLACEHOLDER = re.compile(r"<text: (\d+) chars>")


def _text(n: int) -> str:
    if n == 9:
        return "Say hello"  # the prompt of the captured run
    return (_FILLER * (n // len(_FILLER) + 1))[:n]


def fill(value: Any) -> Any:
    """The captured body with each `<text: N chars>` placeholder replaced by N characters of prose."""
    if isinstance(value, dict):
        return {k: fill(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v) for v in value]
    if isinstance(value, str):
        m = _PLACEHOLDER.fullmatch(value)
        return _text(int(m.group(1))) if m else value
    return value


CAPTURED: dict[str, Any] = {
    "model": "large",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<text: 555 chars>"},
                {"type": "text", "text": "<text: 576 chars>"},
                {"type": "text", "text": "<text: 9 chars>"},
            ],
        },
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "<text: 9109 chars>", "cache_control": {"type": "ephemeral"}}
            ],
        },
    ],
    "system": [
        {"type": "text", "text": "<text: 74 chars>"},
        {"type": "text", "text": "<text: 62 chars>", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "<text: 6759 chars>", "cache_control": {"type": "ephemeral"}},
    ],
    "tools": [
        {
            "name": "Agent",
            "description": "<text: 3225 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "description": {"description": "<text: 42 chars>", "type": "string"},
                    "prompt": {"description": "<text: 33 chars>", "type": "string"},
                    "subagent_type": {"description": "<text: 50 chars>", "type": "string"},
                    "model": {
                        "description": "<text: 358 chars>",
                        "type": "string",
                        "enum": ["sonnet", "opus", "haiku", "fable"],
                    },
                    "effort": {
                        "description": "<text: 341 chars>",
                        "type": "string",
                        "enum": ["low", "medium", "high", "xhigh", "max"],
                    },
                    "run_in_background": {"description": "<text: 286 chars>", "type": "boolean"},
                    "isolation": {
                        "description": "<text: 221 chars>",
                        "type": "string",
                        "enum": ["worktree", "remote"],
                    },
                },
                "required": ["description", "prompt"],
                "additionalProperties": False,
            },
        },
        {
            "name": "Bash",
            "description": "<text: 2110 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "command": {"description": "<text: 22 chars>", "type": "string"},
                    "timeout": {"description": "<text: 70 chars>", "type": "number"},
                    "description": {"description": "<text: 926 chars>", "type": "string"},
                    "run_in_background": {"description": "<text: 181 chars>", "type": "boolean"},
                    "dangerouslyDisableSandbox": {"description": "<text: 90 chars>", "type": "boolean"},
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        },
        {
            "name": "Edit",
            "description": "<text: 360 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "file_path": {"description": "<text: 39 chars>", "type": "string"},
                    "old_string": {"description": "<text: 19 chars>", "type": "string"},
                    "new_string": {"description": "<text: 63 chars>", "type": "string"},
                    "replace_all": {"description": "<text: 53 chars>", "default": False, "type": "boolean"},
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": False,
            },
        },
        {
            "name": "ListAgents",
            "description": "<text: 1433 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "channel": {"description": "<text: 41 chars>", "type": "string", "maxLength": 256},
                    "q": {"description": "<text: 41 chars>", "type": "string", "maxLength": 256},
                    "cursor": {"description": "<text: 96 chars>", "type": "string", "maxLength": 256},
                },
                "additionalProperties": False,
            },
        },
        {
            "name": "Read",
            "description": "<text: 790 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "file_path": {"description": "<text: 37 chars>", "type": "string"},
                    "offset": {
                        "description": "<text: 92 chars>",
                        "type": "integer",
                        "minimum": 0,
                        "maximum": 9007199254740991,
                    },
                    "limit": {
                        "description": "<text: 83 chars>",
                        "type": "integer",
                        "exclusiveMinimum": 0,
                        "maximum": 9007199254740991,
                    },
                    "pages": {"description": "<text: 113 chars>", "type": "string"},
                    "allow_large": {"description": "<text: 281 chars>", "type": "boolean"},
                },
                "required": ["file_path"],
                "additionalProperties": False,
            },
        },
        {
            "name": "ReportFindings",
            "description": "<text: 574 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "level": {
                        "description": "<text: 30 chars>",
                        "type": "string",
                        "enum": ["low", "medium", "high", "xhigh", "max"],
                    },
                    "findings": {
                        "description": "<text: 60 chars>",
                        "maxItems": 32,
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "file": {"description": "<text: 48 chars>", "type": "string"},
                                "line": {
                                    "description": "<text: 37 chars>",
                                    "type": "integer",
                                    "minimum": -9007199254740991,
                                    "maximum": 9007199254740991,
                                },
                                "summary": {"description": "<text: 23 chars>", "type": "string"},
                                "short_summary": {
                                    "description": "<text: 96 chars>",
                                    "type": "string",
                                    "maxLength": 60,
                                },
                                "failure_scenario": {"description": "<text: 42 chars>", "type": "string"},
                                "category": {
                                    "description": "<text: 110 chars>",
                                    "type": "string",
                                    "maxLength": 40,
                                },
                                "severity": {
                                    "description": "<text: 166 chars>",
                                    "type": "string",
                                    "enum": ["important", "pre_existing", "nit"],
                                },
                                "verdict": {
                                    "description": "<text: 57 chars>",
                                    "type": "string",
                                    "enum": ["CONFIRMED", "PLAUSIBLE"],
                                },
                                "outcome": {
                                    "description": "<text: 78 chars>",
                                    "type": "string",
                                    "enum": ["fixed", "skipped", "no_change_needed"],
                                },
                            },
                            "required": ["file", "summary", "failure_scenario"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["findings"],
                "additionalProperties": False,
            },
        },
        {
            "name": "ScheduleWakeup",
            "description": "<text: 3396 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "delaySeconds": {"description": "<text: 98 chars>", "type": "number"},
                    "reason": {"description": "<text: 136 chars>", "type": "string"},
                    "prompt": {"description": "<text: 355 chars>", "type": "string"},
                    "stop": {"description": "<text: 154 chars>", "type": "boolean"},
                    "noop": {"description": "<text: 307 chars>", "type": "boolean"},
                },
                "additionalProperties": False,
            },
        },
        {
            "name": "Skill",
            "description": "<text: 1417 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "skill": {"description": "<text: 71 chars>", "type": "string"},
                    "args": {"description": "<text: 32 chars>", "type": "string"},
                },
                "required": ["skill"],
                "additionalProperties": False,
            },
        },
        {
            "name": "ToolSearch",
            "description": "<text: 952 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "query": {"description": "<text: 99 chars>", "type": "string"},
                    "max_results": {"description": "<text: 48 chars>", "default": 5, "type": "number"},
                },
                "required": ["query", "max_results"],
                "additionalProperties": False,
            },
        },
        {
            "name": "Workflow",
            "description": "<text: 3496 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "script": {"description": "<text: 207 chars>", "type": "string", "maxLength": 524288},
                    "name": {"description": "<text: 105 chars>", "type": "string"},
                    "description": {"description": "<text: 68 chars>", "type": "string"},
                    "title": {"description": "<text: 62 chars>", "type": "string"},
                    "args": {"description": "<text: 280 chars>"},
                    "scriptPath": {"description": "<text: 329 chars>", "type": "string"},
                    "resumeFromRunId": {
                        "description": "<text: 568 chars>",
                        "type": "string",
                        "pattern": "^wf_[a-z0-9-]{6,}$",
                    },
                },
                "additionalProperties": False,
            },
        },
        {
            "name": "DeferredToolPlaceholder",
            "description": "<text: 83 chars>",
            "input_schema": {"type": "object", "properties": {}},
            "defer_loading": True,
        },
        {
            "name": "Write",
            "description": "<text: 240 chars>",
            "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "file_path": {"description": "<text: 71 chars>", "type": "string"},
                    "content": {"description": "<text: 32 chars>", "type": "string"},
                },
                "required": ["file_path", "content"],
                "additionalProperties": False,
            },
        },
    ],
    "metadata": {"user_id": "<text: 150 chars>"},
    "max_tokens": 32000,
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "stream": True,
}


_REFERENCE = Path("/work/shared/reference/agent-requests/claude-code-2.1.328-messages.json")


@pytest.mark.skipif(not _REFERENCE.exists(), reason="the capture is kept outside the repository")
def test_the_embedded_body_is_the_captured_one() -> None:
    assert orjson.loads(_REFERENCE.read_bytes())["body"] == CAPTURED


_CHAT: TypeAdapter[Any] = TypeAdapter(CompletionCreateParamsStreaming)
_MESSAGE: TypeAdapter[Any] = TypeAdapter(ChatCompletionMessageParam)
_PARTS: TypeAdapter[Any] = TypeAdapter(list[ChatCompletionContentPartParam])
_TOOLS: TypeAdapter[Any] = TypeAdapter(list[ChatCompletionFunctionToolParam])


def assert_valid_chat(chat: dict[str, Any]) -> None:
    """A Chat Completions request by the openai SDK's own types (their iterables are checked one by one:
    pydantic validates an Iterable lazily)."""
    _CHAT.validate_python(chat)
    for message in chat["messages"]:
        _MESSAGE.validate_python(message)
        if isinstance(message["content"], list):
            _PARTS.validate_python(message["content"])
    _TOOLS.validate_python(chat.get("tools", []))


def test_claude_codes_first_request_is_a_valid_chat_request() -> None:
    request = fill(CAPTURED)
    chat = D.to_chat(request)
    assert_valid_chat(chat)
    system = request["system"]
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "system"]
    assert chat["messages"][0]["content"] == "\n".join(b["text"] for b in system)
    assert [p["text"] for p in chat["messages"][1]["content"]][-1] == "Say hello"
    assert len(chat["messages"][2]["content"]) == 9109
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == [t["name"] for t in request["tools"] if t["name"] != "DeferredToolPlaceholder"]
    assert chat["tools"][1]["function"]["parameters"] == request["tools"][1]["input_schema"]
    assert chat["chat_template_kwargs"] == {"enable_thinking": True}
    assert chat["reasoning_effort"] == "high"
    assert re.fullmatch(r"[0-9a-f]{64}", chat["prompt_cache_key"])
    assert (chat["max_tokens"], chat["stream"], chat["user"]) == (32000, True, request["metadata"]["user_id"])
    assert chat["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    for key in ("thinking", "context_management", "output_config", "metadata", "system"):
        assert key not in chat
    assert dropped_tools(request) == []
    assert count_request(request)["messages"] == chat["messages"]


def _assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def _user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def test_claude_codes_later_turns() -> None:
    """The turns after the first: the omitted-display thinking block the gateway answered, a tool call and
    its result, a ToolSearch result loading the deferred tool; the breakpoint moved to the last message."""
    request = fill(CAPTURED)
    first = [*request["messages"]]
    first[1] = {"role": "system", "content": [{"type": "text", "text": first[1]["content"][0]["text"]}]}
    thought = {"type": "thinking", "thinking": "", "signature": SEALER.sign("")}
    call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "ToolSearch",
        "input": {"query": "q", "max_results": 5},
    }
    found = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "tool_reference", "tool_name": "DeferredToolPlaceholder"}],
        "cache_control": EPHEMERAL,
    }
    request["messages"] = [*first, _assistant(thought, call), _user(found)]
    chat = D.to_chat(request)
    assert_valid_chat(chat)
    assert chat["messages"][3:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "ToolSearch", "arguments": '{"query":"q","max_results":5}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Tool available: DeferredToolPlaceholder"},
    ]
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names == [t["name"] for t in request["tools"]]  # the deferred tool, loaded, in its place
    # The same conversation: the same key, though the breakpoints moved.
    assert chat["prompt_cache_key"] == D.to_chat(fill(CAPTURED))["prompt_cache_key"]


# -- system-role messages ---------------------------------------------------------------------------------


def test_system_role_messages_stay_where_they_are() -> None:
    chat = D.to_chat(
        body(
            system="top",
            messages=[
                USER,
                {"role": "system", "content": "a string"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "system",
                    "content": [
                        {"type": "text", "text": "x", "cache_control": EPHEMERAL},
                        {"type": "text", "text": "y"},
                    ],
                },
                {"role": "system", "content": ""},
                {"role": "system", "content": []},
                USER,
            ],
        )
    )
    assert chat["messages"] == [
        {"role": "system", "content": "top"},
        USER,
        {"role": "system", "content": "a string"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "x\ny"},
        USER,
    ]
    assert_valid_chat({**chat, "stream": True})


@pytest.mark.parametrize(
    ("content", "param", "code"),
    [
        ([{"type": "image", "source": {}}], "messages[1].content[0].type", "invalid_value"),
        ([{"type": "text"}], "messages[1].content[0].text", "missing_required_parameter"),
        (
            [{"type": "text", "text": "x", "cache_control": "yes"}],
            "messages[1].content[0].cache_control",
            "invalid_type",
        ),
        ({"text": "x"}, "messages[1].content", "invalid_type"),
    ],
)
def test_system_role_message_refusals(content: Any, param: str, code: str) -> None:
    refused(body(messages=[USER, {"role": "system", "content": content}]), param, code)


# -- thinking: validation and the pool's reasoning controls ----------------------------------------------

THINKING_MAPS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "enabled",
        body(thinking={"type": "enabled", "budget_tokens": 1024}),
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    (
        "enabled, budget above max_tokens (interleaved thinking)",
        body(thinking={"type": "enabled", "budget_tokens": 100_000, "display": "summarized"}),
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    (
        "adaptive, effort max",
        body(thinking={"type": "adaptive", "display": "omitted"}, output_config={"effort": "max"}),
        {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high"},
    ),
    (
        "adaptive, effort xhigh",
        body(thinking={"type": "adaptive"}, output_config={"effort": "xhigh"}),
        {"reasoning_effort": "high"},
    ),
    (
        "adaptive, effort low",
        body(thinking={"type": "adaptive"}, output_config={"effort": "low"}),
        {"reasoning_effort": "low"},
    ),
    (
        "enabled, effort medium",
        body(thinking={"type": "enabled", "budget_tokens": 2000}, output_config={"effort": "medium"}),
        {"reasoning_effort": "medium"},
    ),
    (
        "between_tools",
        body(thinking={"type": "between_tools"}),
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    (
        "disabled: no effort",
        body(thinking={"type": "disabled"}, output_config={"effort": "high"}),
        {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": None},
    ),
    (
        "merged over the client's chat_template_kwargs",
        body(thinking={"type": "disabled"}, chat_template_kwargs={"enable_thinking": True, "custom": 1}),
        {"chat_template_kwargs": {"enable_thinking": False, "custom": 1}},
    ),
    (
        "no thinking: nothing added",
        body(output_config={"effort": "high"}, chat_template_kwargs={"enable_thinking": True}),
        {"chat_template_kwargs": None, "reasoning_effort": None},
    ),
]


@pytest.mark.parametrize(
    ("name", "request_body", "expected"), THINKING_MAPS, ids=[t[0] for t in THINKING_MAPS]
)
def test_thinking_maps_to_the_pools_reasoning_controls(
    name: str, request_body: dict[str, Any], expected: dict[str, Any]
) -> None:
    chat = D.to_chat(request_body)
    assert {k: chat.get(k) for k in expected} == expected
    assert "thinking" not in chat and "budget_tokens" not in orjson.dumps(chat).decode()


def test_count_request_validates_thinking_and_adds_no_controls() -> None:
    chat = count_request(
        body(
            thinking={"type": "adaptive"},
            output_config={"effort": "high"},
            system=[{"type": "text", "text": "s", "cache_control": EPHEMERAL}],
        )
    )
    assert (
        "chat_template_kwargs" not in chat
        and "reasoning_effort" not in chat
        and "prompt_cache_key" not in chat
    )
    with pytest.raises(InvalidRequestError) as info:
        count_request(body(thinking={"type": "enabled"}))
    assert info.value.param == "thinking.budget_tokens"


THINKING_REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    (body(thinking="on"), "thinking", "invalid_type"),
    (body(thinking={}), "thinking.type", "missing_required_parameter"),
    (body(thinking={"type": "on"}), "thinking.type", "invalid_value"),
    (body(thinking={"type": 1}), "thinking.type", "invalid_type"),
    (body(thinking={"type": "enabled"}), "thinking.budget_tokens", "missing_required_parameter"),
    (body(thinking={"type": "enabled", "budget_tokens": 1023}), "thinking.budget_tokens", "invalid_value"),
    (body(thinking={"type": "enabled", "budget_tokens": "2048"}), "thinking.budget_tokens", "invalid_type"),
    (body(thinking={"type": "enabled", "budget_tokens": 2048.0}), "thinking.budget_tokens", "invalid_type"),
    (body(thinking={"type": "enabled", "budget_tokens": True}), "thinking.budget_tokens", "invalid_type"),
    (body(thinking={"type": "adaptive", "display": "full"}), "thinking.display", "invalid_value"),
    (body(thinking={"type": "adaptive", "display": 1}), "thinking.display", "invalid_value"),
    (body(output_config={"effort": "extreme"}), "output_config.effort", "invalid_value"),
    (body(output_config={"effort": 3}), "output_config.effort", "invalid_value"),
    (body(thinking={"type": "adaptive"}, chat_template_kwargs="x"), "chat_template_kwargs", "invalid_type"),
]


@pytest.mark.parametrize(
    ("request_body", "param", "code"), THINKING_REFUSALS, ids=[f"{r[1]}-{r[2]}" for r in THINKING_REFUSALS]
)
def test_thinking_refusals(request_body: dict[str, Any], param: str, code: str) -> None:
    refused(request_body, param, code)


# -- thinking blocks sent back -----------------------------------------------------------------------------


def _sent_back(*blocks: dict[str, Any]) -> dict[str, Any]:
    return body(messages=[USER, _assistant(*blocks, {"type": "text", "text": "done"}), USER])


def test_the_gateways_own_thinking_blocks_are_verified_and_dropped() -> None:
    chat = D.to_chat(
        _sent_back(
            {"type": "thinking", "thinking": "step 1", "signature": SEALER.sign("step 1")},
            {"type": "thinking", "thinking": "", "signature": SEALER.sign("")},
            {"type": "redacted_thinking", "data": SEALER.seal("hidden")},
        )
    )
    assert chat["messages"] == [USER, {"role": "assistant", "content": "done"}, USER]


SENT_BACK_REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    (
        {"type": "thinking", "thinking": "step 1", "signature": "forged"},
        "messages[1].content[0].signature",
        "invalid_value",
    ),
    (
        {"type": "thinking", "thinking": "step 2", "signature": SEALER.sign("step 1")},
        "messages[1].content[0].signature",
        "invalid_value",
    ),
    (
        {"type": "thinking", "thinking": "x", "signature": Sealer(b"o" * 32).sign("x")},
        "messages[1].content[0].signature",
        "invalid_value",
    ),
    ({"type": "thinking", "thinking": "x"}, "messages[1].content[0].signature", "missing_required_parameter"),
    (
        {"type": "thinking", "signature": SEALER.sign("")},
        "messages[1].content[0].thinking",
        "missing_required_parameter",
    ),
    (
        {"type": "thinking", "thinking": 1, "signature": "s"},
        "messages[1].content[0].thinking",
        "invalid_type",
    ),
    (
        {"type": "thinking", "thinking": "x", "signature": 1},
        "messages[1].content[0].signature",
        "invalid_type",
    ),
    ({"type": "redacted_thinking", "data": "opaque"}, "messages[1].content[0].data", "invalid_value"),
    (
        {"type": "redacted_thinking", "data": Sealer(b"o" * 32).seal("x")},
        "messages[1].content[0].data",
        "invalid_value",
    ),
    ({"type": "redacted_thinking"}, "messages[1].content[0].data", "missing_required_parameter"),
]


@pytest.mark.parametrize(
    ("block", "param", "code"),
    SENT_BACK_REFUSALS,
    ids=[f"{i}-{r[2]}" for i, r in enumerate(SENT_BACK_REFUSALS)],
)
def test_thinking_blocks_sent_back_refusals(block: dict[str, Any], param: str, code: str) -> None:
    message = refused(_sent_back(block), param, code)
    if code == "invalid_value":
        assert "not issued by this gateway" in message


def test_thinking_blocks_in_a_user_turn_are_refused() -> None:
    block = {"type": "thinking", "thinking": "x", "signature": SEALER.sign("x")}
    refused(body(messages=[_user(block)]), "messages[0].content[0].type", "invalid_value")


def test_count_request_checks_signatures_only_with_a_sealer() -> None:
    request = _sent_back({"type": "thinking", "thinking": "x", "signature": "forged"})
    assert count_request(request)["messages"][1] == {"role": "assistant", "content": "done"}
    for count in (lambda b: count_request(b, SEALER), D.count_request):
        with pytest.raises(InvalidRequestError) as info:
            count(request)
        assert info.value.param == "messages[1].content[0].signature"
    with pytest.raises(InvalidRequestError):  # the shape is checked either way
        count_request(_sent_back({"type": "thinking", "thinking": "x"}))


def test_a_dialect_without_a_sealer_verifies_only_its_own() -> None:
    a, b = MessagesDialect(), MessagesDialect()
    chat = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi", "reasoning_content": "r"},
                "finish_reason": "stop",
            }
        ],
    }
    request = body(thinking={"type": "adaptive"})
    block = a.from_chat(chat, request)["content"][0]
    back = body(messages=[USER, _assistant(block), USER])
    a.to_chat(back)
    refused(back, "messages[1].content[0].signature", "invalid_value", dialect=b)


# -- thinking in answers ----------------------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-t1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 16},
        },
    }


ADAPTIVE = body(thinking={"type": "adaptive"})
OMITTED = body(thinking={"type": "adaptive", "display": "omitted"})
ANSWERS: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = [
    (
        "reasoning_content",
        ADAPTIVE,
        {"content": "4", "reasoning_content": "2+2"},
        [
            {"type": "thinking", "thinking": "2+2", "signature": SEALER.sign("2+2")},
            {"type": "text", "text": "4"},
        ],
    ),
    (
        "reasoning (newer vLLM)",
        body(thinking={"type": "enabled", "budget_tokens": 1024}),
        {"content": "4", "reasoning": "2+2"},
        [
            {"type": "thinking", "thinking": "2+2", "signature": SEALER.sign("2+2")},
            {"type": "text", "text": "4"},
        ],
    ),
    (
        "both names: one block",
        ADAPTIVE,
        {"content": "4", "reasoning_content": "2+2", "reasoning": "2+2"},
        [
            {"type": "thinking", "thinking": "2+2", "signature": SEALER.sign("2+2")},
            {"type": "text", "text": "4"},
        ],
    ),
    (
        "omitted display",
        OMITTED,
        {"content": "4", "reasoning_content": "2+2"},
        [{"type": "thinking", "thinking": "", "signature": SEALER.sign("")}, {"type": "text", "text": "4"}],
    ),
    (
        "before tool calls",
        ADAPTIVE,
        {
            "content": None,
            "reasoning": "look it up",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}],
        },
        [
            {"type": "thinking", "thinking": "look it up", "signature": SEALER.sign("look it up")},
            {"type": "tool_use", "id": "c1", "name": "get", "input": {}},
        ],
    ),
    (
        "no reasoning: no block",
        ADAPTIVE,
        {"content": "4", "reasoning_content": None},
        [{"type": "text", "text": "4"}],
    ),
    (
        "no thinking asked: dropped",
        body(),
        {"content": "4", "reasoning_content": "2+2"},
        [{"type": "text", "text": "4"}],
    ),
    (
        "disabled: dropped",
        body(thinking={"type": "disabled"}),
        {"content": "4", "reasoning": "2+2"},
        [{"type": "text", "text": "4"}],
    ),
]


@pytest.mark.parametrize(("name", "request_body", "message", "content"), ANSWERS, ids=[a[0] for a in ANSWERS])
def test_from_chat_answers_reasoning_as_a_signed_thinking_block(
    name: str, request_body: dict[str, Any], message: dict[str, Any], content: list[dict[str, Any]]
) -> None:
    answer = D.from_chat(completion(message), request_body)
    Message.model_validate(answer)
    assert answer["content"] == content
    # What was answered goes back verified, and is not sent to the pool.
    chat = D.to_chat(body(messages=[USER, {"role": "assistant", "content": answer["content"]}, USER]))
    assert "2+2" not in orjson.dumps(chat).decode()


def test_usage_counts_cache_reads_apart_from_input() -> None:
    usage = D.from_chat(completion({"content": "x"}), body())["usage"]
    assert usage == {
        "input_tokens": 4,
        "output_tokens": 9,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 16,
    }


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": "chatcmpl-s2",
        "object": "chat.completion.chunk",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = usage
    return out


def _tc(index: int, arguments: str, id_: str | None = None, name: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        fn["name"] = name
    return {"index": index, "id": id_, "type": "function" if id_ else None, "function": fn}


USAGE = {"prompt_tokens": 30, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 24}}
REASONING_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Let me "}),
    chunk({"reasoning": "think", "reasoning_content": "think"}),  # a version sending both names
    chunk({"reasoning_content": "."}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, "stop"),
    chunk(None, usage=USAGE),
]


def sse(request: dict[str, Any], chunks: list[dict[str, Any]]) -> bytes:
    t = D.stream(request)
    return b"".join(t.feed(c) for c in chunks) + t.close()


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            head, data = frame.split("\n")
            out.append((head.removeprefix("event: "), orjson.loads(data.removeprefix("data: "))))
    return out


_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def _blocks_of(parsed: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
    """(event, what it carries) of each content block event."""
    out: list[tuple[str, Any]] = []
    for name, data in parsed:
        if name != "ping":
            _EVENT.validate_python(data)
        if name == "content_block_start":
            out.append(("start", data["index"], data["content_block"]))
        elif name == "content_block_delta":
            out.append(("delta", data["index"], data["delta"]))
        elif name == "content_block_stop":
            out.append(("stop", data["index"]))
    return out


def test_stream_a_thinking_block_before_the_text() -> None:
    parsed = events(sse(ADAPTIVE, REASONING_STREAM))
    assert _blocks_of(parsed) == [
        ("start", 0, {"type": "thinking", "thinking": "", "signature": ""}),
        ("delta", 0, {"type": "thinking_delta", "thinking": "Let me "}),
        ("delta", 0, {"type": "thinking_delta", "thinking": "think"}),
        ("delta", 0, {"type": "thinking_delta", "thinking": "."}),
        ("delta", 0, {"type": "signature_delta", "signature": SEALER.sign("Let me think.")}),
        ("stop", 0),
        ("start", 1, {"type": "text", "text": ""}),
        ("delta", 1, {"type": "text_delta", "text": "Hel"}),
        ("delta", 1, {"type": "text_delta", "text": "lo"}),
        ("stop", 1),
    ]
    assert parsed[-2][1]["usage"] == {
        "input_tokens": 6,
        "output_tokens": 8,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 24,
    }


def test_stream_omitted_display_sends_only_the_signature() -> None:
    assert _blocks_of(events(sse(OMITTED, REASONING_STREAM)))[:3] == [
        ("start", 0, {"type": "thinking", "thinking": "", "signature": ""}),
        ("delta", 0, {"type": "signature_delta", "signature": SEALER.sign("")}),
        ("stop", 0),
    ]


@pytest.mark.parametrize(
    "request_body", [body(), body(thinking={"type": "disabled"})], ids=["absent", "disabled"]
)
def test_stream_without_thinking_drops_reasoning(request_body: dict[str, Any]) -> None:
    starts = [
        b[2]["type"] for b in _blocks_of(events(sse(request_body, REASONING_STREAM))) if b[0] == "start"
    ]
    assert starts == ["text"]


def test_stream_interleaved_reasoning_and_tool_calls() -> None:
    chunks = [
        chunk({"reasoning_content": "first"}),
        chunk({"tool_calls": [_tc(0, "", "call_a", "get")]}),
        chunk({"tool_calls": [_tc(0, '{"q": ')]}),
        chunk({"tool_calls": [_tc(0, '"x"}')]}),
        chunk({"reasoning": "then"}),
        chunk({"content": "done"}, "tool_calls"),
    ]
    assert _blocks_of(events(sse(ADAPTIVE, chunks))) == [
        ("start", 0, {"type": "thinking", "thinking": "", "signature": ""}),
        ("delta", 0, {"type": "thinking_delta", "thinking": "first"}),
        ("delta", 0, {"type": "signature_delta", "signature": SEALER.sign("first")}),
        ("stop", 0),
        ("start", 1, {"type": "tool_use", "id": "call_a", "name": "get", "input": {}}),
        ("delta", 1, {"type": "input_json_delta", "partial_json": '{"q": '}),
        ("delta", 1, {"type": "input_json_delta", "partial_json": '"x"}'}),
        ("stop", 1),
        ("start", 2, {"type": "thinking", "thinking": "", "signature": ""}),
        ("delta", 2, {"type": "thinking_delta", "thinking": "then"}),
        ("delta", 2, {"type": "signature_delta", "signature": SEALER.sign("then")}),
        ("stop", 2),
        ("start", 3, {"type": "text", "text": ""}),
        ("delta", 3, {"type": "text_delta", "text": "done"}),
        ("stop", 3),
    ]


def test_stream_reasoning_to_the_end_is_signed_on_close() -> None:
    parsed = _blocks_of(events(sse(ADAPTIVE, [chunk({"reasoning_content": "cut"}, "length")])))
    assert parsed[-2:] == [
        ("delta", 0, {"type": "signature_delta", "signature": SEALER.sign("cut")}),
        ("stop", 0),
    ]


# -- the anthropic SDK over a mock transport: thinking streamed, accumulated, sent back -------------------


def _client(chunks: list[dict[str, Any]], chats: list[dict[str, Any]]) -> anthropic.Anthropic:
    def handle(request: httpx2.Request) -> httpx2.Response:
        req = orjson.loads(request.content)
        try:
            chats.append(D.to_chat(req))
        except InvalidRequestError as exc:
            return httpx2.Response(400, json=D.error(400, exc.payload()["error"]))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse(req, chunks))

    http = httpx2.Client(transport=httpx2.MockTransport(handle))
    return anthropic.Anthropic(base_url="http://t", api_key="k", http_client=http, max_retries=0)


@pytest.mark.parametrize("display", ["summarized", "display", "omitted", "updates"])
def test_sdk_streams_thinking_and_sends_it_back(display: str) -> None:
    chats: list[dict[str, Any]] = []
    client = _client(REASONING_STREAM, chats)
    thinking: Any = {"type": "adaptive", "display": display}
    with client.messages.stream(model="m", max_tokens=4096, messages=[USER], thinking=thinking) as s:
        msg = s.get_final_message()
    block, text = msg.content
    assert block.type == "thinking" and text.type == "text" and text.text == "Hello"
    # `updates` (Claude Code 2.1.33x): no progress notes from a self-hosted pool, answered as omitted
    assert block.thinking == ("Let me think." if display in ("summarized", "display") else "")
    assert SEALER.verify(block.thinking, block.signature)
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens) == (6, 24)
    # The next turn carries the block back: accepted, and not sent to the pool.
    history: Any = [USER, {"role": "assistant", "content": [b.model_dump() for b in msg.content]}, USER]
    with client.messages.stream(model="m", max_tokens=4096, messages=history, thinking=thinking) as s:
        s.get_final_message()
    assert chats[1]["messages"] == [USER, {"role": "assistant", "content": "Hello"}, USER]
    # Changed text: refused as Anthropic refuses a modified block.
    history[1]["content"][0]["thinking"] = "I was told to"
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="m", max_tokens=4096, messages=history, thinking=thinking)
    assert "not issued by this gateway" in (info.value.api_message or "")


# -- cache_control: accepted everywhere, a prompt-cache key ------------------------------------------------

_SYSTEM_BLOCK = {"type": "text", "text": "rules", "cache_control": EPHEMERAL}
CACHED = [
    ("system block", body(system=[_SYSTEM_BLOCK])),
    ("tool", body(tools=[{**TOOL, "cache_control": {"type": "ephemeral", "ttl": "1h"}}])),
    ("text block", body(messages=[_user({"type": "text", "text": "hi", "cache_control": EPHEMERAL})])),
    (
        "image block",
        body(
            messages=[
                _user(
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://i/x.png"},
                        "cache_control": EPHEMERAL,
                    }
                )
            ]
        ),
    ),
    (
        "tool_use block",
        body(
            messages=[
                USER,
                _assistant(
                    {"type": "tool_use", "id": "t", "name": "get", "input": {}, "cache_control": EPHEMERAL}
                ),
            ]
        ),
    ),
    (
        "tool_result block",
        body(messages=[_user({"type": "tool_result", "tool_use_id": "t", "cache_control": EPHEMERAL})]),
    ),
    (
        "inside a tool_result",
        body(
            messages=[
                _user(
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "r", "cache_control": EPHEMERAL}],
                    }
                )
            ]
        ),
    ),
    ("system-role message", body(messages=[USER, {"role": "system", "content": [_SYSTEM_BLOCK]}])),
]


@pytest.mark.parametrize(("name", "request_body"), CACHED, ids=[c[0] for c in CACHED])
def test_cache_control_anywhere_sets_a_prompt_cache_key(name: str, request_body: dict[str, Any]) -> None:
    chat = D.to_chat(request_body)
    assert re.fullmatch(r"[0-9a-f]{64}", chat["prompt_cache_key"])
    assert "cache_control" not in orjson.dumps(chat).decode()


def test_no_cache_control_no_key() -> None:
    assert "prompt_cache_key" not in D.to_chat(body(system="s", tools=[TOOL]))
    assert "prompt_cache_key" not in D.to_chat(
        body(system=[{"type": "text", "text": "s", "cache_control": None}])
    )


def _key(**extra: Any) -> str:
    key: str = D.to_chat(body(**extra))["prompt_cache_key"]
    return key


def test_the_key_is_the_conversation_roots() -> None:
    turn1 = [_user({"type": "text", "text": "fix the bug", "cache_control": EPHEMERAL})]
    turn2 = [
        _user({"type": "text", "text": "fix the bug"}),
        {"role": "assistant", "content": "done"},
        _user({"type": "text", "text": "thanks", "cache_control": EPHEMERAL}),
    ]
    system = [_SYSTEM_BLOCK]
    assert _key(system=system, messages=turn1) == _key(system=system, messages=turn2)
    assert _key(system=system, messages=turn1) == _key(system=system, messages=turn1, tools=[TOOL])
    assert _key(system=system, messages=turn1) != _key(system="other rules", messages=turn1)
    other = [_user({"type": "text", "text": "write a test", "cache_control": EPHEMERAL})]
    assert _key(system=system, messages=turn1) != _key(system=system, messages=other)
    assert _key(system=system, messages=turn1) != _key(system=system, messages=turn1, model="other")


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (body(system=[{**_SYSTEM_BLOCK, "cache_control": "ephemeral"}]), "system[0].cache_control"),
        (body(tools=[{**TOOL, "cache_control": True}]), "tools[0].cache_control"),
        (
            body(messages=[_user({"type": "text", "text": "x", "cache_control": []})]),
            "messages[0].content[0].cache_control",
        ),
    ],
)
def test_cache_control_must_be_an_object(request_body: dict[str, Any], param: str) -> None:
    refused(request_body, param, "invalid_type")


# -- tools --------------------------------------------------------------------------------------------------

ANTHROPIC_TOOLS: list[dict[str, Any]] = [
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    {"type": "web_fetch_20250910", "name": "web_fetch"},
    {"type": "code_execution_20250825", "name": "code_execution"},
    {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    {"type": "tool_search_tool_bm25", "name": "tool_search_tool_bm25"},
    {"type": "mcp_toolset", "mcp_server_name": "github"},
    {"type": "bash_20250124", "name": "bash"},
    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
    {"type": "memory_20250818", "name": "memory", "cache_control": EPHEMERAL},
    {"type": "advisor_20260301"},
]


def test_anthropic_defined_tools_are_dropped_and_named() -> None:
    request = body(tools=[ANTHROPIC_TOOLS[0], TOOL, *ANTHROPIC_TOOLS[1:]])
    chat = D.to_chat(request)
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
    ]
    assert dropped_tools(request) == [
        "web_search", "web_fetch", "code_execution", "tool_search_tool_regex", "tool_search_tool_bm25",
        "github", "bash", "str_replace_based_edit_tool", "computer", "memory", "advisor_20260301",
    ]  # fmt: skip


def test_only_anthropic_tools_left_means_no_tools() -> None:
    request = body(tools=ANTHROPIC_TOOLS[:2], tool_choice={"type": "auto"})
    chat = D.to_chat(request)
    assert "tools" not in chat and "tool_choice" not in chat


@pytest.mark.parametrize(
    "junk", [{}, {"tools": "x"}, {"tools": [1, {"type": 3}, {"type": "custom", "name": "c"}, TOOL]}]
)
def test_dropped_tools_is_tolerant(junk: dict[str, Any]) -> None:
    assert dropped_tools(junk) == []


def test_deferred_tools_wait_for_a_tool_reference() -> None:
    deferred = {"name": "later", "input_schema": {"type": "object"}, "defer_loading": True}
    assert [t["function"]["name"] for t in D.to_chat(body(tools=[TOOL, deferred]))["tools"]] == ["get"]
    loaded = body(
        tools=[deferred, TOOL],
        messages=[
            USER,
            _assistant({"type": "tool_use", "id": "t1", "name": "search", "input": {}}),
            _user(
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "found:"},
                        {"type": "tool_reference", "tool_name": "later"},
                    ],
                }
            ),
        ],
        tool_choice={"type": "tool", "name": "later"},
    )
    chat = D.to_chat(loaded)
    assert [t["function"]["name"] for t in chat["tools"]] == ["later", "get"]
    assert chat["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "t1",
        "content": "found:\nTool available: later",
    }
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "later"}}


@pytest.mark.parametrize(
    ("tools", "name", "why"),
    [
        ([TOOL, ANTHROPIC_TOOLS[0]], "web_search", "Anthropic-defined tool"),
        ([TOOL, {"name": "later", "input_schema": {}, "defer_loading": True}], "later", "deferred tool"),
    ],
)
def test_tool_choice_naming_a_tool_the_pool_is_not_given(
    tools: list[dict[str, Any]], name: str, why: str
) -> None:
    message = refused(
        body(tools=tools, tool_choice={"type": "tool", "name": name}), "tool_choice.name", "invalid_value"
    )
    assert why in message


def test_tool_fields_accepted_and_ignored() -> None:
    extras = {
        "type": "custom",
        "strict": True,
        "defer_loading": False,
        "input_examples": [{"q": "x"}],
        "eager_input_streaming": True,
        "allowed_callers": ["direct"],
        "cache_control": EPHEMERAL,
    }
    assert D.to_chat(body(tools=[{**TOOL, **extras}]))["tools"] == D.to_chat(body(tools=[TOOL]))["tools"]


TOOL_REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    ({**TOOL, "strict": "yes"}, "tools[0].strict", "invalid_type"),
    ({**TOOL, "defer_loading": 1}, "tools[0].defer_loading", "invalid_type"),
    ({**TOOL, "input_examples": {}}, "tools[0].input_examples", "invalid_type"),
    ({**TOOL, "eager_input_streaming": "y"}, "tools[0].eager_input_streaming", "invalid_type"),
    ({**TOOL, "allowed_callers": "direct"}, "tools[0].allowed_callers", "invalid_type"),
    ({"type": "web_search", "name": "w"}, "tools[0].type", "unsupported_value"),
    ({"type": "WEB_SEARCH_20250305", "name": "w"}, "tools[0].type", "unsupported_value"),
]


@pytest.mark.parametrize(
    ("tool", "param", "code"), TOOL_REFUSALS, ids=[r[1] + "-" + r[2] for r in TOOL_REFUSALS]
)
def test_tool_refusals(tool: dict[str, Any], param: str, code: str) -> None:
    refused(body(tools=[tool]), param, code)


def test_tool_reference_needs_a_name() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_reference"}]}
    refused(
        body(messages=[_user(result)]),
        "messages[0].content[0].content[0].tool_name",
        "missing_required_parameter",
    )


# -- other fields Claude Code sends -------------------------------------------------------------------------

OTHER_REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    (
        body(mcp_servers=[{"type": "url", "url": "https://mcp.example/sse", "name": "x"}]),
        "mcp_servers",
        "unsupported_value",
    ),
    (body(mcp_servers={}), "mcp_servers", "invalid_type"),
    (body(context_management=[]), "context_management", "invalid_type"),
    (body(container=1), "container", "invalid_type"),
    (body(service_tier=1), "service_tier", "invalid_type"),
]


@pytest.mark.parametrize(
    ("request_body", "param", "code"), OTHER_REFUSALS, ids=[r[1] + "-" + r[2] for r in OTHER_REFUSALS]
)
def test_other_refusals(request_body: dict[str, Any], param: str, code: str) -> None:
    refused(request_body, param, code)
