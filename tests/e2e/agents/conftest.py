"""Real coding-agent CLIs (Claude Code, Codex) against the real gateway and one simulator.

The CLIs come from `make agent-clis` (ci/agents/package.json, pinned, into .tools/agents); without them
the tests skip. The simulator drives the agent loop (eval/sim/agent.py): a `[[sim:call NAME {args}]]`
marker in the prompt makes it call that tool, the agent runs it and sends the result back, and the
simulator closes with `Done: <result>`. It runs with `--reasoning-parser qwen3`, so a request that asks
for thinking gets reasoning tokens, and `--record-requests`, so a test sees exactly what reached the
model; the gateway writes its request log (one JSON line per request, with its status) to its log.

Each CLI runs with a scratch HOME (and CODEX_HOME), telemetry and updates off, stdin closed, in a scratch
working directory, as shared/tooling.md describes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.procs import ROOT, free_port
from tests.support.stack import Service, Stack

BIN = ROOT / ".tools" / "agents" / "node_modules" / ".bin"
ALIAS = "agent"
CLI_TIMEOUT_S = 90.0
# Variables of the developer's own agent setup that would point the CLIs elsewhere.
_FOREIGN_ENV = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_")


@dataclass(frozen=True)
class Exchange:
    """What one CLI run caused: the bodies the simulator received and the gateway's request-log lines."""

    requests: list[dict[str, Any]]
    log: list[dict[str, Any]]
    seconds: float

    def statuses(self) -> list[int]:
        return [int(line["status"]) for line in self.log]


@dataclass
class AgentStack:
    gateway: Service
    key: str
    record: Path

    def _log_lines(self) -> list[str]:
        return [ln for ln in self.gateway.log_text().splitlines() if ln.startswith('{"ts"')]

    def run(
        self, argv: list[str], env: dict[str, str], cwd: Path
    ) -> tuple[subprocess.CompletedProcess[str], Exchange]:
        """Run a CLI to its end; the exchange is what the gateway and simulator saw meanwhile."""
        seen_requests = self.record.stat().st_size if self.record.exists() else 0
        seen_log = len(self._log_lines())
        base = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
        start = time.monotonic()
        proc = subprocess.run(
            argv,
            env={**base, **env},
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        seconds = time.monotonic() - start
        with self.record.open("rb") as f:
            f.seek(seen_requests)
            requests = [json.loads(line) for line in f.read().splitlines() if line]

        # The gateway logs a request once its answer is out, so the CLI may exit first: each request the
        # simulator answered has its 200 line within a moment (refused ones never reached it).
        def logged() -> list[dict[str, Any]]:
            new = [json.loads(line) for line in self._log_lines()[seen_log:]]
            done = sum(1 for line in new if line["status"] == 200)
            return new if new and done >= len(requests) else []

        what = f"a 200 request-log line for each of the {len(requests)} requests the simulator answered"
        log = wait_until(logged, what, timeout=5.0, interval=0.05)
        return proc, Exchange(requests, log, seconds)


def cli(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in .tools/agents (make agent-clis)")
    return path


@pytest.fixture(scope="session")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentStack]:
    if not any((BIN / name).exists() for name in ("claude", "codex")):
        pytest.skip("no agent CLI in .tools/agents (make agent-clis)")
    tmp = tmp_path_factory.mktemp("agents")
    sim_port = free_port()
    key = generate_key()
    record = tmp / "sim-requests.jsonl"
    policy = tmp / "policy.yaml"
    # Claude Code asks for max_tokens 32000: the cap lets it through; the simulator's answers are short.
    policy.write_text(
        f"""\
pools:
  - name: p
    model: sim
    endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}
models:
  - {{name: {ALIAS}, route: {{pool: p}}, max_tokens: {{default: 256, cap: 64000}}}}
limits:
  backend: memory
tenancy:
  keys:
    - {{id: agents, sha256: {hash_key(key)}, org: acme, app: agents}}
"""
    )
    with Stack(tmp) as s:
        s.sim(
            "sim", "--profile", "instant", "--output-len-mean", "12", "--reasoning-parser", "qwen3",
            "--record-requests", str(record), port=sim_port, name="sim", ready=False,
        )  # fmt: skip
        gw = s.gateway(policy, ready_path="/readyz", env={"LLMGW_REQUEST_LOG": "true"})
        yield AgentStack(gw, key, record)


def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """A scratch HOME and working directory for one CLI run."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def tool_round_trip(requests: list[dict[str, Any]], tool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The assistant's call of `tool` and the `tool` message answering it, from the request that sent
    the result back (asserting there is one)."""
    for body in requests:
        messages = body["messages"]
        for i, m in enumerate(messages):
            if m.get("role") != "tool":
                continue
            calls = [c for prev in messages[:i] for c in prev.get("tool_calls") or []]
            call = next((c for c in calls if c["id"] == m.get("tool_call_id")), None)
            if call is not None and call["function"]["name"] == tool:
                return call, m
    raise AssertionError(
        f"no request carried a result of a {tool} call: {[len(b['messages']) for b in requests]}"
    )
