"""Claude Code (`claude -p`, Anthropic Messages, streamed) through the gateway: a plain prompt, and the
Bash tool loop (call, result sent back, final answer), with every request answered 200 and the usage
Claude Code reports equal to what the gateway logged."""

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


def claude(agents: AgentStack, tmp_path: Path, prompt: str, *args: str) -> tuple[dict[str, Any], Exchange]:
    home, work = scratch(tmp_path)
    env = {
        "ANTHROPIC_BASE_URL": agents.gateway.url,
        "ANTHROPIC_API_KEY": agents.key,
        "HOME": str(home),
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    argv = [str(cli("claude")), "-p", prompt, "--model", ALIAS, "--output-format", "json", *args]
    proc, exchange = agents.run(argv, env, work)
    assert proc.returncode == 0, (
        f"claude exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    )
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["is_error"] is False and out["subtype"] == "success", out.get("result")
    return out, exchange


def assert_clean(out: dict[str, Any], exchange: Exchange) -> None:
    """Every request of the run went through the Messages endpoint and was answered 200, and Claude Code
    counts the tokens the gateway counted."""
    assert exchange.log and exchange.statuses() == [200] * len(exchange.log), exchange.log
    assert {line["endpoint"] for line in exchange.log} == {"messages"}
    assert all(line["stream"] for line in exchange.log)  # claude -p streams
    assert out["usage"]["input_tokens"] == sum(line["input_tokens"] for line in exchange.log)
    assert out["usage"]["output_tokens"] == sum(line["output_tokens"] for line in exchange.log)


def test_plain_prompt_answers(agents: AgentStack, tmp_path: Path) -> None:
    out, exchange = claude(agents, tmp_path, "Say hello")
    assert_clean(out, exchange)
    assert out["result"].strip()
    # The simulator thinks first (Claude Code asks for thinking): none of it may leak into the answer.
    assert "Let me think" not in out["result"]
    assert any("Say hello" in last_user_text(body) for body in exchange.requests)


def test_bash_tool_loop_runs_the_command_and_answers(agents: AgentStack, tmp_path: Path) -> None:
    prompt = 'Run the command: echo hi [[sim:call Bash {"command": "echo hi"}]]'
    out, exchange = claude(agents, tmp_path, prompt, "--allowedTools", "Bash")
    assert_clean(out, exchange)
    assert out["result"] == "Done: hi" and out["num_turns"] == 2
    assert len(exchange.requests) == 2
    first, second = exchange.requests
    assert "Bash" in [t["function"]["name"] for t in first["tools"]]
    assert not any(m["role"] == "tool" for m in first["messages"])
    call, result = tool_round_trip([second], "Bash")
    assert json.loads(call["function"]["arguments"]) == {"command": "echo hi"}
    assert result["content"].strip() == "hi"  # the command ran, and its output came back
