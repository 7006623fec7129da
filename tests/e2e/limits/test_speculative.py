"""Speculative admission (`limits.speculative`, docs/design/017): the pool call overlaps the
reservation's round trip, the answer never does.

Real processes: redis-server, a simulator, one or two gateways on the same Redis, the `openai` SDK.
- Served requests of a key far from its limits go speculative after its first admission; every one
  carries the `x-ratelimit-*` headers, and settlement stays exact (the counters equal the usage the
  simulator reported, no lease is left).
- A speculative request that the shared budget refuses (another gateway spent it meanwhile) gets the
  normal 429 with Retry-After, long before the pool would have answered; the pool call is aborted, and
  the refused request holds and is charged nothing.
- A speculative request whose pool fails before (or after) its ticket arrives leaks no lease.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import openai
import pytest
import redis

from gateway.edge.exchange import Kind
from gateway.relay.normalize import estimate_input_tokens
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import (
    TenantKey,
    base_key,
    chat_body,
    live_leases,
    sim_tokens,
    sub_window_counters,
    write_policy,
)
from tests.support.poll import wait_until_async
from tests.support.procs import free_port
from tests.support.prom import metric
from tests.support.redis_server import RedisServer

SPECULATIVE = "{backend: redis, on_backend_error: fail_closed, speculative: {enabled: true, memory_s: 30}}"
MESSAGES = [{"role": "user", "content": "Count to ten, please."}]


def _policy(tmp_path: Path, urls: list[str], key: TenantKey, org_limits: str) -> Path:
    """One pool over `urls`, one key of org `acme`, the Redis limiter with speculation on."""
    return write_policy(
        tmp_path / "policy.yaml", urls, [key], limits=SPECULATIVE, org_limits={"acme": org_limits}
    )


def _spec_count(url: str, outcome: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return metric(text, "llmgw_ratelimit_speculative_total", f'outcome="{outcome}"')


async def test_speculative_requests_are_served_and_settled_exactly(
    tmp_path, redis_server: RedisServer, sims: SimFactory
) -> None:
    sim = sims("sim", "--profile", "instant")
    key = TenantKey.new("spec", "acme", "spec")
    policy = _policy(tmp_path, [sim], key, "{tokens_per_min: 1000000, requests_per_min: 100000}")
    r = redis.Redis.from_url(redis_server.url)
    with gateway(policy, redis_server.url, tmp_path / "gateway.log") as (url, _):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key.key, max_retries=0)
        used = 0
        remaining: list[int] = []
        for _ in range(6):
            raw = await client.chat.completions.with_raw_response.create(
                model="sim", messages=MESSAGES, max_tokens=5, extra_body={"ignore_eos": True}
            )
            remaining.append(int(raw.headers["x-ratelimit-remaining-tokens"]))
            assert raw.headers["x-llmgw-cache-status"] == "bypass"
            completion = raw.parse()
            assert completion.choices[0].message.content
            assert completion.usage is not None
            used += completion.usage.total_tokens
        for _ in range(4):
            stream = await client.chat.completions.create(
                model="sim",
                messages=MESSAGES,
                max_tokens=7,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
            assert usage is not None and usage.completion_tokens == 7
            used += usage.total_tokens
        # The first admission is synchronous (nothing known about the key yet), the other nine overlap.
        assert _spec_count(url, "admitted") == 9
        assert _spec_count(url, "refused") == 0
        assert remaining == sorted(remaining, reverse=True)  # each answer saw its own reservation
        await client.close()

        # Settlement is exact: the org's settled tokens are the usage the simulator reported.
        org_tokens = base_key("org", "acme", "tokens")
        await wait_until_async(
            lambda: sum(sub_window_counters(r, org_tokens).values()) == used,
            "the org's usage settled",
            timeout=5,
        )
        assert used == sim_tokens([sim])
        await wait_until_async(
            lambda: not live_leases(r), lambda: f"no live lease: {live_leases(r)}", timeout=5
        )


async def test_speculative_refusal_cancels_the_pool_call(
    tmp_path, redis_server: RedisServer, sims: SimFactory
) -> None:
    # 50 ms per token: a 40-token answer takes ~2 s, far longer than a refusal takes to arrive.
    sim = sims("sim-slow", "--profile", "instant", "--step-base-ms", "50")
    key = TenantKey.new("spec", "acme", "spec")
    tokens = 3000
    policy = _policy(tmp_path, [sim], key, f"{{tokens_per_min: {tokens}}}")
    r = redis.Redis.from_url(redis_server.url)
    with (
        gateway(policy, redis_server.url, tmp_path / "gateway-a.log") as (url_a, _),
        gateway(policy, redis_server.url, tmp_path / "gateway-b.log") as (url_b, _),
    ):
        a = openai.AsyncOpenAI(base_url=f"{url_a}/v1", api_key=key.key, max_retries=0)
        b = openai.AsyncOpenAI(base_url=f"{url_b}/v1", api_key=key.key, max_retries=0)
        # 1. Through A: the key is far from its limits, so A will speculate for its next request.
        first = await a.chat.completions.create(model="sim", messages=MESSAGES, max_tokens=1)
        assert first.usage is not None
        # 2. Through B: a long stream holds all but 20 tokens of the org's budget while it runs.
        # the first request is settled
        await wait_until_async(
            lambda: not live_leases(r), lambda: f"no live lease: {live_leases(r)}", timeout=5
        )
        hold = tokens - first.usage.total_tokens - estimate_input_tokens(Kind.CHAT, chat_body(1), 1.0) - 20
        held = await b.chat.completions.create(
            model="sim",
            messages=MESSAGES,
            max_tokens=hold,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        held_iter = aiter(held)
        await anext(held_iter)  # admitted and running
        # 3. Through A again: speculative (A has not seen B's reservation); Redis refuses it.
        sim_metrics = lambda: httpx.get(f"{sim}/metrics", timeout=10).text  # noqa: E731
        finished_before = metric(sim_metrics(), "vllm:request_success_total")
        t = time.perf_counter()
        with pytest.raises(openai.RateLimitError) as refused:
            await a.chat.completions.create(
                model="sim", messages=MESSAGES, max_tokens=40, extra_body={"ignore_eos": True}
            )
        elapsed = time.perf_counter() - t
        assert elapsed < 1.0, elapsed  # the pool would have needed ~2 s: the refusal did not wait for it
        resp = refused.value.response
        assert int(resp.headers["retry-after"]) >= 1
        assert int(resp.headers["x-ratelimit-remaining-tokens"]) < 40
        assert refused.value.code == "rate_limit_exceeded"
        assert _spec_count(url_a, "refused") == 1
        # The pool call was cancelled: only B's stream is left in the simulator, nothing waits, and the
        # refused call did not run to its end. Like vLLM 0.32, the simulator does not count a client abort
        # in request_success_total{finished_reason="abort"}, so that counter cannot show the cancel.
        await wait_until_async(
            lambda: metric(sim_metrics(), "vllm:num_requests_running") == 1, "one request running", timeout=5
        )
        assert metric(sim_metrics(), "vllm:num_requests_waiting") == 0
        await asyncio.sleep(2.5)  # the 40-token answer (~2 s) would have finished by now
        assert metric(sim_metrics(), "vllm:request_success_total") == finished_before

        # 4. A forgot the key's headroom with the refusal: its next request waits for admission first.
        with pytest.raises(openai.RateLimitError):
            await a.chat.completions.create(model="sim", messages=MESSAGES, max_tokens=40)
        assert _spec_count(url_a, "refused") == 1

        # 5. B's stream ends; everything admitted is settled to the simulator's usage, nothing leaks,
        # and the refused (aborted) request was charged nothing.
        await held.close()
        await asyncio.sleep(0.2)
        await a.close()
        await b.close()
        await wait_until_async(
            lambda: not live_leases(r), lambda: f"no live lease: {live_leases(r)}", timeout=5
        )
        org_tokens = base_key("org", "acme", "tokens")
        settled = sum(sub_window_counters(r, org_tokens).values())
        assert settled <= tokens
        assert settled >= first.usage.total_tokens


async def test_a_speculative_request_whose_pool_fails_first_leaks_nothing(
    tmp_path, redis_server: RedisServer
) -> None:
    # The only replica refuses connections: the pool call fails in about as long as the admission takes,
    # so the ticket arrives before or after the request ended; either way it must be settled (to 0).
    dead = f"http://127.0.0.1:{free_port()}"
    key = TenantKey.new("spec", "acme", "spec")
    policy = _policy(tmp_path, [dead], key, "{tokens_per_min: 1000000}")
    r = redis.Redis.from_url(redis_server.url)
    with gateway(policy, redis_server.url, tmp_path / "gateway.log") as (url, _):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key.key, max_retries=0)
        for _ in range(5):  # the first admission is synchronous, the others speculative
            with pytest.raises(openai.APIStatusError) as failed:
                await client.chat.completions.create(model="sim", messages=MESSAGES, max_tokens=5)
            assert failed.value.status_code in (502, 503)
        await client.close()
        await wait_until_async(lambda: _spec_count(url, "admitted") == 4, "4 admitted", timeout=5)
        await wait_until_async(
            lambda: not live_leases(r), lambda: f"no live lease: {live_leases(r)}", timeout=5
        )
        # Nothing was processed, so nothing is charged.
        assert sum(sub_window_counters(r, base_key("org", "acme", "tokens")).values()) == 0
