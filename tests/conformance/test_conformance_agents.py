"""Claude Code and Codex through the gateway on real vLLM 0.32 (the tiny model): their real first requests
(Claude Code: system-role messages after the user's, thinking, cache_control, a dozen tools; Codex:
developer messages, flattened namespace tools, reasoning) must be taken by the engine itself, not only by
the simulator (tests/e2e/agents), and the answer must reach the CLI.

The agents' first requests are 6,000 to 7,000 of the tiny model's tokens (system prompt, environment;
the chat template leaves the tools out), far over the suite's 1,024-token servers, so this module starts
its own vLLM (~35 s): the tiny model with a 16 Ki context (`--hf-overrides max_position_embeddings`: past
its 2,048 positions the model only says `<unk>`, token id 0) and a tool parser (vLLM 0.32 refuses tools
with `auto` choice without one). A random model seldom samples its end-of-sequence token, and both CLIs
treat an answer cut at max_tokens as a failure (Claude Code asks to continue, three times, then errors;
Codex fails the turn), so a generation config makes every 8th token id a stop token too: answers end
after ~8 tokens with `end_turn` / `completed` (now and then an empty one, which both take), and the
gateway's cap of 128 is practically never reached ((7/8)^128 < 1e-7). Skips only when the CLIs are not
installed (make agent-clis).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support import vllm
from tests.support.procs import ROOT, free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.conformance

BIN = ROOT / ".tools" / "agents" / "node_modules" / ".bin"
CONTEXT = 16384
CAP = 128
_FOREIGN_ENV = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_")


@dataclass(frozen=True)
class AgentGateway:
    url: str
    key: str
    log: Path  # the gateway's output, with its request log

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in self.log.read_text().splitlines() if ln.startswith('{"ts"')]


def _cli(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in .tools/agents (make agent-clis)")
    return path


@pytest.fixture(scope="module")
def agent_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentGateway]:
    if not any((BIN / name).exists() for name in ("claude", "codex")):
        pytest.skip("no agent CLI in .tools/agents (make agent-clis)")
    tmp = tmp_path_factory.mktemp("conformance-agents")
    vllm.ensure_model()
    generation = tmp / "generation-config"
    generation.mkdir()
    stops = [2, *range(8, 4096, 8)]  # the real EOS (2) and every 8th id of the 4,096-token vocabulary
    (generation / "generation_config.json").write_text(json.dumps({"eos_token_id": stops}))
    server = vllm.spawn(
        free_port(),
        tmp / "vllm-agents.log",
        extra_args=(
            "--max-model-len", str(CONTEXT),
            "--hf-overrides", json.dumps({"max_position_embeddings": CONTEXT}),
            "--generation-config", str(generation),
            "--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
        ),
    )  # fmt: skip
    try:
        vllm.wait_ready(server)
        key = generate_key()
        policy = tmp / "policy.yaml"
        policy.write_text(
            f"""\
pools:
  - name: v
    model: {vllm.SERVED_NAME}
    endpoints: {{static: ["{server.url}"]}}
    timeouts: {{connect_s: 2, first_token_s: 120, total_s: 180}}
models:
  - {{name: agent, route: {{pool: v}}, max_tokens: {{default: {CAP}, cap: {CAP}}}}}
limits:
  backend: memory
  global: {{tokens_per_min: 100000000}}
tenancy:
  keys:
    - {{id: agents, sha256: {hash_key(key)}, org: conformance, app: agents}}
"""
        )
        with Stack(tmp) as s:
            gw = s.gateway(policy, ready_path="/readyz", env={"LLMGW_REQUEST_LOG": "true"})
            yield AgentGateway(gw.url, key, gw.log)
    finally:
        vllm.stop(server)


def _run(argv: list[str], env: dict[str, str], tmp_path: Path) -> str:
    """Run a CLI with a scratch HOME (env's paths live under it) in a scratch directory; its stdout."""
    work = tmp_path / "work"
    work.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV)}
    proc = subprocess.run(
        argv,
        env={**base, **env},
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{argv[0]} exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    )
    return proc.stdout


def _settled(gateway: AgentGateway, before: int, usage: tuple[int, int]) -> None:
    """Every request of the run answered 200, and the CLI's usage is the engine's, as the gateway logged."""
    lines = gateway.requests()[before:]
    assert lines and [line["status"] for line in lines] == [200] * len(lines), lines
    assert usage == (sum(ln["input_tokens"] for ln in lines), sum(ln["output_tokens"] for ln in lines))
    assert usage[0] > 1000 * len(lines)  # the whole system prompt reached the engine


def test_claude_code_plain_prompt_on_vllm(agent_gateway: AgentGateway, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    before = len(agent_gateway.requests())
    env = {
        "ANTHROPIC_BASE_URL": agent_gateway.url,
        "ANTHROPIC_API_KEY": agent_gateway.key,
        "HOME": str(home),
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    argv = [str(_cli("claude")), "-p", "Say hello", "--model", "agent", "--output-format", "json"]
    out = json.loads(_run(argv, env, tmp_path))
    assert out["is_error"] is False and out["subtype"] == "success", out.get("result")
    assert out["stop_reason"] == "end_turn"
    _settled(agent_gateway, before, (out["usage"]["input_tokens"], out["usage"]["output_tokens"]))


def test_codex_plain_prompt_on_vllm(agent_gateway: AgentGateway, tmp_path: Path) -> None:
    home = tmp_path / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f"""\
model = "agent"
model_provider = "gw"

[model_providers.gw]
name = "llmgw"
base_url = "{agent_gateway.url}/v1"
env_key = "LLMGW_API_KEY"
wire_api = "responses"
"""
    )
    before = len(agent_gateway.requests())
    env = {"CODEX_HOME": str(codex_home), "HOME": str(home), "LLMGW_API_KEY": agent_gateway.key}
    argv = [str(_cli("codex")), "exec", "--json", "--skip-git-repo-check", "Say hello"]
    events = [json.loads(ln) for ln in _run(argv, env, tmp_path).splitlines() if ln.startswith("{")]
    assert not [e for e in events if e["type"] in ("error", "turn.failed")], events
    (done,) = [e for e in events if e["type"] == "turn.completed"]
    _settled(agent_gateway, before, (done["usage"]["input_tokens"], done["usage"]["output_tokens"]))
