"""Codex (`codex exec`, OpenAI Responses, streamed) through the gateway: a plain prompt, the shell tool
loop (exec_command run, its output sent back, final answer) and reasoning (`model_reasoning_effort`),
with every request answered 200 and the usage Codex reports equal to what the gateway logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.sim.tokenizer import count_tokens
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


def codex(
    agents: AgentStack, tmp_path: Path, prompt: str, *args: str
) -> tuple[list[dict[str, Any]], Exchange]:
    home, work = scratch(tmp_path)
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f"""\
model = "{ALIAS}"
model_provider = "gw"

[model_providers.gw]
name = "llmgw"
base_url = "{agents.gateway.v1}"
env_key = "LLMGW_API_KEY"
wire_api = "responses"
"""
    )
    env = {"CODEX_HOME": str(codex_home), "HOME": str(home), "LLMGW_API_KEY": agents.key}
    # The sandbox is Codex's business, not the gateway's: off, so a container without user namespaces
    # runs the command too.
    argv = [str(cli("codex")), "exec", "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", *args, prompt]  # fmt: skip
    proc, exchange = agents.run(argv, env, work)
    assert proc.returncode == 0, f"codex exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e["type"] in ("error", "turn.failed")], events
    return events, exchange


def items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == kind]


def assert_clean(events: list[dict[str, Any]], exchange: Exchange) -> dict[str, Any]:
    """Every request went through the Responses endpoint and was answered 200, and Codex counts the
    tokens the gateway counted; returns the turn's usage."""
    assert exchange.log and exchange.statuses() == [200] * len(exchange.log), exchange.log
    assert {line["endpoint"] for line in exchange.log} == {"responses"}
    (done,) = [e for e in events if e["type"] == "turn.completed"]
    usage: dict[str, Any] = done["usage"]
    assert usage["input_tokens"] == sum(line["input_tokens"] for line in exchange.log)
    assert usage["output_tokens"] == sum(line["output_tokens"] for line in exchange.log)
    return usage


def test_plain_prompt_answers(agents: AgentStack, tmp_path: Path) -> None:
    events, exchange = codex(agents, tmp_path, "Say hello")
    usage = assert_clean(events, exchange)
    (message,) = items(events, "agent_message")
    assert message["text"].strip()
    assert usage["reasoning_output_tokens"] == 0 and not items(events, "reasoning")
    assert [last_user_text(body) for body in exchange.requests] == ["Say hello"]


def test_shell_tool_loop_runs_the_command_and_answers(agents: AgentStack, tmp_path: Path) -> None:
    prompt = 'Run the command: echo hi [[sim:call exec_command {"cmd": "echo hi"}]]'
    events, exchange = codex(agents, tmp_path, prompt)
    assert_clean(events, exchange)
    (command,) = items(events, "command_execution")
    assert "echo hi" in command["command"] and command["exit_code"] == 0
    assert command["aggregated_output"] == "hi\n"
    (message,) = items(events, "agent_message")
    assert message["text"].startswith("Done: ")
    assert len(exchange.requests) == 2
    call, result = tool_round_trip(exchange.requests[1:], "exec_command")
    assert json.loads(call["function"]["arguments"]) == {"cmd": "echo hi"}
    assert "hi" in result["content"].splitlines()  # Codex's report of the run ends with the output


def test_reasoning_reaches_codex_and_is_counted(agents: AgentStack, tmp_path: Path) -> None:
    events, exchange = codex(agents, tmp_path, "Say hello", "-c", "model_reasoning_effort=low")
    usage = assert_clean(events, exchange)
    (body,) = exchange.requests
    assert body.get("reasoning_effort") == "low"
    (reasoning,) = items(events, "reasoning")
    assert reasoning["text"].startswith("Let me think.")
    # The simulator's reasoning tokens, counted by its tokenizer, are the ones Codex reports.
    assert usage["reasoning_output_tokens"] == count_tokens(reasoning["text"]) > 0
    (message,) = items(events, "agent_message")
    assert "Let me think" not in message["text"]
