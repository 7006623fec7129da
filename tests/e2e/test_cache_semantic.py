"""The semantic cache through the real gateway: Redis with the query engine (Redis Stack) as the
vector index, the router's encoder for embeddings, the openai SDK as the client.

A paraphrase of an earlier question is answered from the cache (`semantic-hit`), within the same org,
system prompt and parameters only; a different question, another org, or another system prompt never
hits. Against a Redis without the query engine the gateway starts, warns, serves, reports the
semantic cache unavailable in a metric, and the exact cache still works.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.stack import Stack


def _policy(path: Path, sim_port: int, keys: dict[str, str]) -> Path:
    path.write_text(
        f"""\
pools:
  - {{name: small, model: m, endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}}}
models:
  - name: small
    route: {{pool: small}}
    max_tokens: {{default: 16, cap: 64}}
    cache: {{default: deterministic, ttl_s: 60, semantic: {{enabled: true, ttl_s: 60}}}}
cache: {{backend: redis}}
tenancy:
  keys:
    - {{id: a1, sha256: {hash_key(keys["a1"])}, org: acme, app: one}}
    - {{id: b1, sha256: {hash_key(keys["b1"])}, org: globex, app: one}}
"""
    )
    return path


class Gateway:
    def __init__(self, port: int, keys: dict[str, str], log: Path) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.keys = keys
        self.log = log

    def ask(self, who: str, question: str, system: str = "Answer briefly.") -> httpx.Response:
        body = {
            "model": "small",
            "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        }
        r = httpx.post(
            f"{self.base}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {self.keys[who]}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        time.sleep(0.3)  # the write (embedding + index) happens after the answer went out
        return r

    def metric(self, name: str) -> str:
        return "\n".join(
            line
            for line in httpx.get(f"{self.base}/metrics", timeout=5).text.splitlines()
            if line.startswith(name)
        )


@pytest.fixture(scope="module")
def keys() -> dict[str, str]:
    return {"a1": generate_key(), "b1": generate_key()}


def _stack(tmp: Path, keys: dict[str, str], stack: bool) -> Iterator[Gateway]:
    with Stack(tmp) as s:
        redis = s.redis(stack=stack)
        sim = s.sim("m", "--profile", "instant")
        policy = _policy(tmp / "policy.yaml", sim.port, keys)
        gw = s.gateway(policy, env={"LLMGW_REDIS_URL": redis.url})
        yield Gateway(gw.port, keys, gw.log)


@pytest.fixture(scope="module")
def with_query_engine(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, str]) -> Iterator[Gateway]:
    yield from _stack(tmp_path_factory.mktemp("semantic"), keys, stack=True)


@pytest.fixture(scope="module")
def without_query_engine(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, str]) -> Iterator[Gateway]:
    yield from _stack(tmp_path_factory.mktemp("plain"), keys, stack=False)


def test_paraphrase_hits_within_scope_only(with_query_engine: Gateway) -> None:
    gw = with_query_engine
    assert "llmgw_cache_semantic_available 1.0" in gw.metric("llmgw_cache_semantic_available")
    first = gw.ask("a1", "How do I reset my password?")
    assert first.headers["x-llmgw-cache-status"] == "miss"
    para = gw.ask("a1", "How can I reset my password?")
    assert para.headers["x-llmgw-cache-status"] == "semantic-hit"
    assert para.content == first.content
    # Same topic, different question: no hit.
    assert gw.ask("a1", "How do I change my email address?").headers["x-llmgw-cache-status"] == "miss"
    # Another org asking the very same question: never the first org's answer.
    other = gw.ask("b1", "How do I reset my password?")
    assert other.headers["x-llmgw-cache-status"] == "miss"
    assert other.json()["id"] != first.json()["id"]
    # Another system prompt: another partition.
    sys2 = gw.ask("a1", "How do I reset my password?", system="Answer in French.")
    assert sys2.headers["x-llmgw-cache-status"] == "miss"
    lines = gw.metric("llmgw_cache_requests_total")
    assert 'status="semantic-hit"' in lines


def test_without_query_engine_the_gateway_warns_and_exact_cache_works(without_query_engine: Gateway) -> None:
    gw = without_query_engine
    assert "llmgw_cache_semantic_available 0.0" in gw.metric("llmgw_cache_semantic_available")
    assert "semantic cache disabled" in gw.log.read_text()
    first = gw.ask("a1", "What is the refund policy?")
    assert first.headers["x-llmgw-cache-status"] == "miss"
    again = gw.ask("a1", "What is the refund policy?")
    assert again.headers["x-llmgw-cache-status"] == "hit"
    assert again.content == first.content
    assert gw.ask("a1", "What's the refund policy?").headers["x-llmgw-cache-status"] == "miss"
