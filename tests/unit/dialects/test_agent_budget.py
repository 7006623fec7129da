"""Issue 40: the budget's reservation counts every tool definition and message an agent sends: a
20-tool Claude Code-shaped request and a Codex-shaped one with namespace tools, through their dialects,
are estimated at no less than their tools' and messages' bytes at the estimate's bytes per token, and
each tool adds its own size."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.dialects.messages import MessagesDialect
from gateway.dialects.responses import ResponsesDialect
from gateway.edge.exchange import Kind
from gateway.relay.normalize import estimate_input_tokens

BYTES_PER_TOKEN = 4.0
EPHEMERAL = {"type": "ephemeral"}


def _schema(i: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            f"arg{j}": {"type": "string", "description": f"argument {j} of tool {i}"} for j in range(4)
        },
        "required": ["arg0"],
    }


def _claude_code(tools: int) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are an agent. " * 40, "cache_control": EPHEMERAL}],
        "tools": [
            {"name": f"Tool{i}", "description": f"Does thing {i}. " * 20, "input_schema": _schema(i)}
            for i in range(tools)
        ],
        "messages": [
            {"role": "user", "content": "List the files, then read the README."},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "Tool0", "input": {"arg0": "ls -la " * 10}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "README.md\nsetup.py\n" * 30},
            ]},
            {"role": "system", "content": "Reminder: be careful. " * 10},
        ],
    }  # fmt: skip


def _bytes(chat: dict[str, Any]) -> int:
    texts = 0
    for m in chat["messages"]:
        content = m.get("content")
        if isinstance(content, str):
            texts += len(content.encode())
        elif isinstance(content, list):
            texts += sum(len(p.get("text", "").encode()) for p in content)
        if m.get("tool_calls"):
            texts += len(orjson.dumps(m["tool_calls"]))
    return texts + len(orjson.dumps(chat.get("tools", [])))


def test_a_20_tool_claude_code_request_reserves_every_tool_and_message() -> None:
    chat = MessagesDialect().to_chat(_claude_code(20))
    assert len(chat["tools"]) == 20
    estimate = estimate_input_tokens(Kind.CHAT, chat, BYTES_PER_TOKEN)
    assert estimate >= _bytes(chat) / BYTES_PER_TOKEN
    fewer = estimate_input_tokens(Kind.CHAT, MessagesDialect().to_chat(_claude_code(19)), BYTES_PER_TOKEN)
    one_tool = len(orjson.dumps(chat["tools"][-1]))
    assert estimate - fewer >= one_tool / BYTES_PER_TOKEN - 1
    # the tool call and its result (the largest message) are counted too
    without_result = _claude_code(20)
    without_result["messages"] = without_result["messages"][:2] + without_result["messages"][3:]
    without_result["messages"][1]["content"] = "Listing."
    smaller = estimate_input_tokens(Kind.CHAT, MessagesDialect().to_chat(without_result), BYTES_PER_TOKEN)
    assert estimate - smaller >= len(("README.md\nsetup.py\n" * 30).encode()) / BYTES_PER_TOKEN


def test_a_codex_request_reserves_its_namespace_tools() -> None:
    members = [
        {"type": "function", "name": f"t{i}", "description": f"tool {i} " * 20, "parameters": _schema(i)}
        for i in range(20)
    ]
    body: dict[str, Any] = {
        "model": "m",
        "instructions": "You are Codex. " * 50,
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "rules " * 30}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
        ],
        "tools": [{"type": "namespace", "name": "mcp", "description": "server", "tools": members}],
        "stream": True,
    }
    chat = ResponsesDialect().to_chat(body)
    assert len(chat["tools"]) == 20
    estimate = estimate_input_tokens(Kind.CHAT, chat, BYTES_PER_TOKEN)
    assert estimate >= _bytes(chat) / BYTES_PER_TOKEN
    body["tools"][0]["tools"] = members[:10]
    half = estimate_input_tokens(Kind.CHAT, ResponsesDialect().to_chat(body), BYTES_PER_TOKEN)
    assert estimate - half >= sum(len(orjson.dumps(t)) for t in chat["tools"][10:]) / BYTES_PER_TOKEN - 1
