"""The exact response cache through the real gateway, driven by the openai SDK (sync and async,
streamed and not), against a simulator process.

What must hold (issue 8): an identical deterministic request is answered from the cache with a
byte-identical body, and a streamed request with an equivalent SSE replay (same content, same
usage); temperature > 0 without opt-in never hits, `x-llmgw-cache: on` opts in; `off` bypasses;
entries expire after the alias's TTL; another org never sees the entry; a hit costs no tokens of the
budget but counts as a request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.tenancy.keys import generate_key, hash_key
from tests.support.poll import wait_until
from tests.support.stack import Stack


class CacheStack:
    def __init__(self, base: str, keys: dict[str, str], metrics: str, log: Path) -> None:
        self.base = base
        self.keys = keys
        self.metrics_url = metrics
        self.log = log

    def client(self, who: str = "a1") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base, api_key=self.keys[who], max_retries=0)

    def raw(self, who: str, body: dict[str, object], headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.base}/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {self.keys[who]}", **(headers or {})},
            timeout=30,
        )

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(self.metrics_url, timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CacheStack]:
    tmp = tmp_path_factory.mktemp("cache")
    keys = {"a1": generate_key(), "a2": generate_key(), "b1": generate_key()}
    with Stack(tmp) as s:
        sim = s.sim("m", "--profile", "instant")
        policy = tmp / "policy.yaml"
        policy.write_text(
            f"""\
pools:
  - {{name: small, model: m, endpoints: {{static: ["{sim.url}"]}}}}
models:
  - name: small
    route: {{pool: small}}
    max_tokens: {{default: 16, cap: 64}}
    cache: {{default: deterministic, ttl_s: 3}}
  - name: nocache
    route: {{pool: small}}
    max_tokens: {{default: 16, cap: 64}}
limits:
  tiers:
    standard:
      key: {{requests_per_min: 1000, tokens_per_min: 1000000}}
tenancy:
  keys:
    - {{id: a1, sha256: {hash_key(keys["a1"])}, org: acme, app: one}}
    - {{id: a2, sha256: {hash_key(keys["a2"])}, org: acme, app: two}}
    - {{id: b1, sha256: {hash_key(keys["b1"])}, org: globex, app: one}}
"""
        )
        gw = s.gateway(policy, env={"LLMGW_REQUEST_LOG": "true"})
        yield CacheStack(gw.v1, keys, f"{gw.url}/metrics", gw.log)


def _q(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": text}]


def test_identical_deterministic_request_gets_byte_identical_body(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("What is a cache? one"), "temperature": 0}
    first = stack.raw("a1", body)
    assert first.status_code == 200
    assert first.headers["x-llmgw-cache-status"] == "miss"
    time.sleep(0.2)  # the write happens after the answer went out
    second = stack.raw("a1", body)
    assert second.status_code == 200
    assert second.headers["x-llmgw-cache-status"] == "hit"
    assert second.content == first.content
    # Same org, another app (scope: org): the entry is shared inside the org.
    assert stack.raw("a2", body).headers["x-llmgw-cache-status"] == "hit"
    # Field order in the request does not matter.
    reordered = {"temperature": 0, "messages": body["messages"], "model": "small"}
    assert stack.raw("a1", reordered).content == first.content


def test_other_org_never_hits(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("tenant isolation probe"), "temperature": 0}
    first = stack.raw("a1", body)
    time.sleep(0.2)
    other = stack.raw("b1", body)
    assert other.headers["x-llmgw-cache-status"] == "miss"
    assert other.json()["id"] != first.json()["id"]


def test_stream_hit_replays_same_content_and_usage(stack: CacheStack) -> None:
    client = stack.client()
    msgs = _q("stream me a cached answer")
    unary = client.chat.completions.with_raw_response.create(model="small", messages=msgs, seed=7)
    assert unary.headers["x-llmgw-cache-status"] == "miss"
    completion = unary.parse()
    time.sleep(0.2)
    raw = client.chat.completions.with_raw_response.create(
        model="small", messages=msgs, seed=7, stream=True, stream_options={"include_usage": True}
    )
    assert raw.headers["x-llmgw-cache-status"] == "hit"
    text, usage, finish = "", None, None
    for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text == completion.choices[0].message.content
    assert finish == completion.choices[0].finish_reason
    assert usage is not None and completion.usage is not None
    assert usage.prompt_tokens == completion.usage.prompt_tokens
    assert usage.completion_tokens == completion.usage.completion_tokens


def test_streamed_miss_fills_the_cache_for_both_forms(stack: CacheStack) -> None:
    client = stack.client()
    msgs = _q("a streamed answer is stored too")
    text = ""
    for chunk in client.chat.completions.create(model="small", messages=msgs, temperature=0, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
    time.sleep(0.2)
    raw = client.chat.completions.with_raw_response.create(model="small", messages=msgs, temperature=0)
    assert raw.headers["x-llmgw-cache-status"] == "hit"
    assert raw.parse().choices[0].message.content == text

    async def streamed_again() -> str:
        aclient = openai.AsyncOpenAI(base_url=stack.base, api_key=stack.keys["a1"], max_retries=0)
        out = ""
        stream = await aclient.chat.completions.create(
            model="small", messages=msgs, temperature=0, stream=True
        )
        async for chunk in stream:
            for c in chunk.choices:
                out += c.delta.content or ""
        await aclient.close()
        return out

    assert asyncio.run(streamed_again()) == text


def test_sampled_requests_never_hit_without_opt_in(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("sampled answer"), "temperature": 0.8}
    ids = set()
    for _ in range(3):
        r = stack.raw("a1", body)
        assert r.headers["x-llmgw-cache-status"] == "bypass"
        ids.add(r.json()["id"])
        time.sleep(0.1)
    assert len(ids) == 3
    # No temperature at all means OpenAI's default (1): sampled, not cached either.
    plain = {"model": "small", "messages": _q("sampled answer")}
    assert stack.raw("a1", plain).headers["x-llmgw-cache-status"] == "bypass"
    # The caller opts in: cached even though it samples.
    on = {"x-llmgw-cache": "on"}
    first = stack.raw("a1", body, on)
    assert first.headers["x-llmgw-cache-status"] == "miss"
    time.sleep(0.2)
    again = stack.raw("a1", body, on)
    assert again.headers["x-llmgw-cache-status"] == "hit" and again.content == first.content


def test_bypass_header_and_uncached_alias(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("bypass me"), "temperature": 0}
    stack.raw("a1", body)
    time.sleep(0.2)
    off = stack.raw("a1", body, {"x-llmgw-cache": "off"})
    assert off.headers["x-llmgw-cache-status"] == "bypass"
    assert stack.raw("a1", body).headers["x-llmgw-cache-status"] == "hit"
    # An alias without a cache block is never cached, even when asked.
    nc = {**body, "model": "nocache"}
    for _ in range(2):
        r = stack.raw("a1", nc, {"x-llmgw-cache": "on"})
        assert r.headers["x-llmgw-cache-status"] == "bypass"
    bad = stack.raw("a1", body, {"x-llmgw-cache": "maybe"})
    assert bad.status_code == 400
    assert "x-llmgw-cache" in bad.json()["error"]["message"]


def test_entries_expire_after_the_ttl(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("expiring"), "temperature": 0}
    stack.raw("a1", body)
    time.sleep(0.2)
    assert stack.raw("a1", body).headers["x-llmgw-cache-status"] == "hit"
    time.sleep(3.2)
    assert stack.raw("a1", body).headers["x-llmgw-cache-status"] == "miss"


def test_hits_are_counted_and_cost_no_tokens(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("metrics of a hit"), "temperature": 0}
    stack.raw("a1", body)
    time.sleep(0.2)
    before_hits = stack.metric("llmgw_cache_requests_total", model="small", status="hit")
    before_saved = stack.metric("llmgw_cache_saved_tokens_total", model="small", direction="output")
    r = stack.raw("a1", body)
    assert r.headers["x-llmgw-cache-status"] == "hit"
    # A hit is admitted as a request (the rate-limit headers are there) but reserves no tokens.
    assert "x-ratelimit-remaining-requests" in r.headers
    assert stack.metric("llmgw_cache_requests_total", model="small", status="hit") == before_hits + 1
    saved = stack.metric("llmgw_cache_saved_tokens_total", model="small", direction="output")
    assert saved == before_saved + r.json()["usage"]["completion_tokens"]
    assert stack.metric("llmgw_requests_total", model="small", pool="cache", code="200") >= 1


def test_the_request_log_says_where_the_answer_came_from(stack: CacheStack) -> None:
    body = {"model": "small", "messages": _q("logged cache status"), "temperature": 0}
    first = stack.raw("a1", body)
    time.sleep(0.2)
    second = stack.raw("a1", body)
    assert second.headers["x-llmgw-cache-status"] == "hit"
    ids = (first.headers["x-request-id"], second.headers["x-request-id"])

    def logged() -> dict[str, dict[str, object]]:  # a request's line is written after its answer went out
        records = {}
        for line in stack.log.read_text().splitlines():
            if line.startswith('{"ts"'):
                rec = json.loads(line)
                records[rec["request_id"]] = rec
        return records if all(i in records for i in ids) else {}

    records = wait_until(logged, "both requests' lines in the request log", timeout=10, interval=0.05)
    miss, hit = records[first.headers["x-request-id"]], records[second.headers["x-request-id"]]
    assert miss["cache"] == "miss" and miss["pool"] == "small" and miss["output_tokens"] > 0
    # A hit: no pool did work, no tokens were used, the alias is still named.
    assert hit["cache"] == "hit" and hit["pool"] == "cache" and hit["alias"] == "small"
    assert hit["input_tokens"] == 0 and hit["output_tokens"] == 0
