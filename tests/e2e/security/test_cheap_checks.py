"""Cheap checks come first (issue 25): a key at its request rate is refused from memory before its body
is parsed or its prompt routed, and probing model names (404s) spends the key's request rate. A real
gateway (in-memory limiter) in front of a real simulator."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.stack import Stack


@dataclass(frozen=True)
class Gw:
    url: str
    rpm: str  # a key with 3 requests per minute
    probe: str  # another key with 3 requests per minute


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gw]:
    tmp: Path = tmp_path_factory.mktemp("cheap")
    sim_port, gw_port = free_port(), free_port()
    rpm, probe = generate_key(), generate_key()
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"""\
pools:
  - {{name: p, model: m, endpoints: {{static: ["http://127.0.0.1:{sim_port}"]}}}}
models:
  - {{name: m, route: {{pool: p}}, max_tokens: {{default: 4, cap: 8}}}}
tenancy:
  keys:
    - {{id: rpm, sha256: {hash_key(rpm)}, org: acme, app: rpm, limits: {{requests_per_min: 3}}}}
    - {{id: probe, sha256: {hash_key(probe)}, org: acme, app: probe, limits: {{requests_per_min: 3}}}}
"""
    )
    with Stack(tmp) as s:
        s.sim("m", "--profile", "instant", port=sim_port)
        yield Gw(s.gateway(policy, port=gw_port, name="gw").url, rpm, probe)


def _chat(gw: Gw, key: str, model: str = "m", content: str = "hi") -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": content}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def _early(gw: Gw) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=10).text
    return metric(text, "llmgw_ratelimit_decisions_total", 'outcome="refused_early"')


def test_a_key_at_its_request_rate_is_refused_before_its_body_is_parsed(gw: Gw) -> None:
    assert [_chat(gw, gw.rpm).status_code for _ in range(3)] == [200, 200, 200]
    refused = _chat(gw, gw.rpm)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    before = _early(gw)
    # Not even valid JSON: had it been parsed, this would be a 400.
    r = httpx.post(
        f"{gw.url}/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {gw.rpm}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["param"] == "key.requests"
    assert _early(gw) == before + 1


def test_unknown_models_spend_the_request_rate(gw: Gw) -> None:
    codes = [_chat(gw, gw.probe, model=f"probe-{i}").status_code for i in range(3)]
    assert codes == [404, 404, 404]
    after = _chat(gw, gw.probe)
    assert after.status_code == 429, after.text  # the probes used the key's 3 requests
