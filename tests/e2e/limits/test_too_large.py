"""A request that can never fit fails at once, and says so: the official SDK (sync client, default
`max_retries=2`) raises `RateLimitError` after ONE HTTP request, without sleeping for a Retry-After.

Two ways to be too large: a 200 KB prompt on a 100k-tokens-per-minute key (over the limit itself,
found before any Redis call), and a request over what a daily quota has left (the script says so).
Both are 429 `request_too_large` naming the level, the limit and the amount, with
`x-should-retry: false` and no Retry-After / retry-after-ms.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, write_policy
from tests.support.prom import metric
from tests.support.redis_server import RedisServer

PROMPT_200KB = "word " * 40_000  # 200,000 bytes: reserved as >= 200k input tokens at 1 byte/token


def sdk(url: str, key: str, sent: list[httpx.Request]) -> openai.OpenAI:
    """The official client with its default retries; every HTTP request it makes lands in `sent`."""
    http = httpx.Client(event_hooks={"request": [sent.append]}, timeout=30)
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, http_client=http)


def too_large(client: openai.OpenAI, prompt: str, max_tokens: int) -> tuple[openai.RateLimitError, float]:
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens
        )
    return info.value, time.monotonic() - started


def check_refusal(err: openai.RateLimitError, param: str, *words: str) -> None:
    body = err.body
    assert isinstance(body, dict), body
    assert body["code"] == "request_too_large" and body["param"] == param, body
    for word in words:
        assert word in body["message"], body["message"]
    headers = err.response.headers
    assert err.response.status_code == 429
    assert headers["x-should-retry"] == "false"
    assert "retry-after" not in headers and "retry-after-ms" not in headers, dict(headers)


def test_requests_that_can_never_fit_fail_at_once(
    tmp_path: Path, redis_server: RedisServer, sims: SimFactory
) -> None:
    sim = sims("sim", "--profile", "instant")
    tpm = TenantKey.new("tpm", "acme", "big", limits="{tokens_per_min: 100000}")
    daily = TenantKey.new("daily", "acme", "quota", limits="{tokens_per_day: 3000}")
    policy = write_policy(tmp_path / "policy.yaml", [sim], [tpm, daily], limits="{backend: redis}")
    with gateway(policy, redis_server.url, tmp_path / "gateway.log") as (url, _):
        sent: list[httpx.Request] = []
        err, elapsed = too_large(sdk(url, tpm.key, sent), PROMPT_200KB, 16)
        print(
            f"\n[too large] 200 KB prompt on a 100k TPM key: RateLimitError after {elapsed:.3f} s, "
            f"{len(sent)} HTTP request(s); message: {err.message}"
        )
        assert len(sent) == 1, sent  # no SDK retry: the real assertion
        assert elapsed < 5  # generous: the point is no 60 s Retry-After sleep
        check_refusal(err, "key.tokens", "key 'tpm' on tokens per minute", "limit of 100000")

        # The daily quota: 2,000 reserved and settled below what the sim uses; then a request over
        # what is left of the 3,000 (but under the limit itself: only the script can tell).
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=daily.key, max_retries=0)
        first = client.chat.completions.create(
            model="sim",
            messages=[{"role": "user", "content": "x" * 800}],
            max_tokens=1000,
            extra_body={"ignore_eos": True},  # the sim generates all 1000
        )
        assert first.usage is not None
        used = first.usage.total_tokens
        sent.clear()
        err, elapsed = too_large(sdk(url, daily.key, sent), "y" * 2000, 500)
        print(
            f"[too large] quota: {used} of 3000 used today, 2500+ requested: RateLimitError after "
            f"{elapsed:.3f} s, {len(sent)} HTTP request(s)"
        )
        assert len(sent) == 1, sent
        check_refusal(err, "key.tokens_day", "key 'daily' on tokens per day", "limit of 3000")
        text = httpx.get(f"{url}/metrics", timeout=10).text
        assert metric(text, "llmgw_ratelimit_decisions_total", 'outcome="too_large"') == 2
