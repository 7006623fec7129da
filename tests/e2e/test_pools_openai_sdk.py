"""The openai SDK against a three-replica pool: prefix affinity keeps a shared system prompt on one
replica (its prefix cache hits), distinct prompts spread, and streams work through the picker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.support.prom import metric
from tests.support.stack import Stack

pytestmark = pytest.mark.e2e

SYSTEM = "You are the support assistant of a bicycle shop. " * 60  # ~600 tokens, shared


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    tmp: Path = tmp_path_factory.mktemp("pools-e2e")
    with Stack(tmp) as s:
        replicas = [s.sim("chat", name=f"sim-{i}", ready=False) for i in range(3)]
        urls = [r.url for r in replicas]
        listed = ", ".join(f'"{u}"' for u in urls)
        cfg = tmp / "p.yaml"
        cfg.write_text(
            "pools:\n"
            "  - name: chat\n"
            "    model: chat\n"
            f"    endpoints: {{static: [{listed}]}}\n"
            "    balancing: {strategy: prefix_affinity, scrape_interval_s: 0.2}\n"
            "models:\n"
            "  - {name: chat, route: {pool: chat}, max_tokens: {default: 8, cap: 64}}\n"
            "tenancy: {auth: disabled}\n"
        )
        gw = s.gateway(cfg, name="gw")
        yield gw.v1, urls


def _served(urls: list[str]) -> list[float]:
    return [metric(httpx.get(f"{u}/metrics").text, "vllm:request_success_total") for u in urls]


def test_shared_system_prompt_stays_on_one_replica_and_hits_its_prefix_cache(
    pool: tuple[str, list[str]],
) -> None:
    base, urls = pool
    client = OpenAI(base_url=base, api_key="unused", max_retries=0)
    before = _served(urls)
    hits0 = sum(metric(httpx.get(f"{u}/metrics").text, "vllm:prefix_cache_hits_total") for u in urls)
    for i in range(6):  # one at a time: bounded load never needs to spill
        stream = client.chat.completions.create(
            model="chat",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"question {i}"}],
            stream=True,
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    after = _served(urls)
    served = [a - b for a, b in zip(after, before, strict=True)]
    assert sorted(served) == [0, 0, 6]
    hits = sum(metric(httpx.get(f"{u}/metrics").text, "vllm:prefix_cache_hits_total") for u in urls)
    assert hits - hits0 >= 5 * 500  # every request after the first reused the system prompt's blocks
    text = httpx.get(base.removesuffix("/v1") + "/metrics").text
    assert metric(text, "llmgw_pool_picks_total", 'reason="affinity"') >= 6
    assert metric(text, "llmgw_replica_ttft_seconds") > 0  # the replica's recent TTFT, as seen by the gateway


def test_distinct_prompts_spread_over_the_replicas(pool: tuple[str, list[str]]) -> None:
    base, urls = pool
    client = OpenAI(base_url=base, api_key="unused", max_retries=0)
    before = _served(urls)
    for i in range(30):
        system = f"You are assistant number {i} with a persona of your own. " * 40
        client.chat.completions.create(
            model="chat", messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}]
        )
    served = [a - b for a, b in zip(_served(urls), before, strict=True)]
    assert sum(served) == 30 and min(served) >= 1
