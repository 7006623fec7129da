"""A pool with `engine: litellm` serves OpenAI-format answers through LiteLLM, streaming included
(the provider here is a simulator replica behind LiteLLM's OpenAI provider)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.procs import free_port
from tests.support.stack import Stack

pytest.importorskip("litellm")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("litellm")
    sim, gw = free_port(), free_port()
    cfg = tmp / "p.yaml"
    cfg.write_text(
        "pools:\n"
        "  - name: hosted\n"
        "    engine: litellm\n"
        "    model: openai/frontier\n"
        f'    endpoints: {{static: ["http://127.0.0.1:{sim}/v1"]}}\n'
        "    api_key_env: HOSTED_API_KEY\n"
        "models:\n"
        "  - {name: frontier, route: {pool: hosted}, max_tokens: {default: 16, cap: 64}}\n"
        "tenancy: {auth: disabled}\n"
    )
    env = {"HOSTED_API_KEY": "sk-provider", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}
    with Stack(tmp) as s:
        s.sim("frontier", "--api-key", "sk-provider", port=sim)
        yield s.gateway(cfg, port=gw, env=env, name="gw").url


def _body(stream: bool) -> dict[str, object]:
    return {
        "model": "frontier",
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 8,
        "stream": stream,
        "stream_options": {"include_usage": True} if stream else None,
    }


def test_streamed_chat_completion_through_litellm(gateway: str) -> None:
    body = {k: v for k, v in _body(True).items() if v is not None}
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
    assert text  # the simulator's answer, relayed by LiteLLM
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] >= 1


def test_unary_chat_completion_through_litellm(gateway: str) -> None:
    body = {k: v for k, v in _body(False).items() if v is not None}
    r = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["content"]
    assert data["usage"]["prompt_tokens"] > 0
