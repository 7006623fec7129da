"""Claude Code (`claude -p`, Anthropic Messages, streamed) through the gateway: a plain prompt, and the
Bash tool loop (thinking and call, result sent back with the thinking, final answer), with every request
answered 200 and the usage Claude Code reports equal to what the gateway logged.

Claude Code always streams: its only non-streamed request is a fallback after a stream failed midway,
and the gateway answers a pool's failure before the first token with a 502, which Claude Code retries
(streamed, with backoff) instead, so the non-streamed path is left to tests/e2e/test_dialects_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.agents.conftest import (
    ALIAS,
    AgentStack,
    Exchange,
    cli,
    last_user_text,
    scratch,
    tool_round_trip,
)

pytestmark = pytest.mark.e2e


def claude(
    agents: AgentStack, tmp_path: Path, prompt: str, *args: str, stream_json: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]], Exchange]:
    """Run `claude -p`; the result object, the stream-json messages before it (with `stream_json`: every
    block Claude Code received and the tool results it sent) and the exchange."""
    home, work = scratch(tmp_path)
    env = {
        "ANTHROPIC_BASE_URL": agents.gateway.url,
        "ANTHROPIC_API_KEY": agents.key,
        "HOME": str(home),
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    output = ["--output-format", "stream-json", "--verbose"] if stream_json else ["--output-format", "json"]
    argv = [str(cli("claude")), "-p", prompt, "--model", ALIAS, *output, *args]
    proc, exchange = agents.run(argv, env, work)
    assert proc.returncode == 0, (
        f"claude exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    out = lines[-1]
    assert out["type"] == "result", lines
    assert out["is_error"] is False and out["subtype"] == "success", out.get("result")
    return out, lines[:-1], exchange


def blocks(messages: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    """The content blocks of the `role` messages of a stream-json run, in order."""
    return [b for m in messages if m["type"] == role for b in m["message"]["content"]]


def assert_clean(out: dict[str, Any], exchange: Exchange) -> None:
    """Every request of the run went through the Messages endpoint and was answered 200, and Claude Code
    counts the tokens the gateway counted."""
    assert exchange.log and exchange.statuses() == [200] * len(exchange.log), exchange.log
    assert {line["endpoint"] for line in exchange.log} == {"messages"}
    assert all(line["stream"] for line in exchange.log)  # claude -p streams
    assert out["usage"]["input_tokens"] == sum(line["input_tokens"] for line in exchange.log)
    assert out["usage"]["output_tokens"] == sum(line["output_tokens"] for line in exchange.log)


def test_plain_prompt_answers(agents: AgentStack, tmp_path: Path) -> None:
    out, _, exchange = claude(agents, tmp_path, "Say hello")
    assert_clean(out, exchange)
    assert out["result"].strip()
    # The simulator thinks first (Claude Code asks for thinking): none of it may leak into the answer.
    assert "Let me think" not in out["result"]
    assert any("Say hello" in last_user_text(body) for body in exchange.requests)


BASH_PROMPT = 'Run the command: echo hi [[sim:call Bash {"command": "echo hi"}]]'


def test_bash_tool_loop_runs_the_command_and_answers(agents: AgentStack, tmp_path: Path) -> None:
    out, _, exchange = claude(agents, tmp_path, BASH_PROMPT, "--allowedTools", "Bash")
    assert_clean(out, exchange)
    assert out["result"] == "Done: hi" and out["num_turns"] == 2
    assert len(exchange.requests) == 2
    first, second = exchange.requests
    assert "Bash" in [t["function"]["name"] for t in first["tools"]]
    assert not any(m["role"] == "tool" for m in first["messages"])
    call, result = tool_round_trip([second], "Bash")
    assert json.loads(call["function"]["arguments"]) == {"command": "echo hi"}
    assert result["content"].strip() == "hi"  # the command ran, and its output came back


def test_thinking_reaches_claude_code_signed_and_comes_back(agents: AgentStack, tmp_path: Path) -> None:
    """stream-json shows every block Claude Code received. In this mode Claude Code 2.1.332 asks for
    `thinking: {"type": "adaptive", "display": "updates"}` (beta thinking-display-updates-2026-08-18),
    which the gateway answers as "omitted": signed thinking blocks without their text. A refusal of the
    value would make Claude Code retry without it (two wasted 400s a turn): assert_clean catches that."""
    out, messages, exchange = claude(
        agents, tmp_path, BASH_PROMPT, "--allowedTools", "Bash", stream_json=True
    )
    assert_clean(out, exchange)
    assert out["result"] == "Done: hi" and len(exchange.requests) == 2
    # The pool's reasoning as a signed thinking block, then the call; the command ran; the second request
    # (answered 200 above) carried the thinking block back, and the gateway verified its signature.
    received = blocks(messages, "assistant")
    assert [b["type"] for b in received] == ["thinking", "tool_use", "thinking", "text"]
    assert received[0]["signature"] and received[2]["signature"]
    assert received[0]["thinking"] == ""  # display omitted: the simulator's "Let me think. ..." is not sent
    assert received[1]["name"] == "Bash" and received[1]["input"] == {"command": "echo hi"}
    (sent,) = blocks(messages, "user")
    assert sent["type"] == "tool_result" and sent["tool_use_id"] == received[1]["id"]
    assert sent["content"] == "hi"
