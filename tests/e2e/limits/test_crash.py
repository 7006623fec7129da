"""A gateway killed with SIGKILL leaks nothing for longer than one lease.

Its running streams hold concurrency slots and token reservations as leases in Redis; nobody settles
them. A new gateway on the same Redis must find the whole budget free again within `lease_s` (plus a
little slack), and the dead requests must not have been charged anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from contextlib import AsyncExitStack

import httpx

from gateway.edge.exchange import Kind
from gateway.relay.normalize import estimate_input_tokens
from ratelimit.model import LimitsConfig
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, chat_body, write_policy
from tests.support.redis_server import RedisServer

# The gateway's default input estimate (the policies here do not override it).
BYTES_PER_TOKEN = LimitsConfig().input_bytes_per_token

LEASE_S = 3.0
SLOTS = 3
TOKENS = 12000  # per minute, at the org
LONG = 2000  # max_tokens of the doomed streams: 2000 steps of 50 ms, far longer than the test
PROBE_MAX = 40  # ~2 s streams


async def open_stream(
    es: AsyncExitStack, client: httpx.AsyncClient, url: str, key: str, body: dict
) -> httpx.Response:
    """Send a streamed request and return once its headers (i.e. the admission) are in."""
    req = client.build_request(
        "POST", f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    )
    resp = await client.send(req, stream=True)
    es.push_async_callback(resp.aclose)
    return resp


async def test_kill_9_frees_budget_within_one_lease(
    tmp_path, redis_server: RedisServer, sims: SimFactory
) -> None:
    sim = sims("sim-slow", "--profile", "instant", "--step-base-ms", "50")
    key = TenantKey.new("crash", "acme", "crash")
    policy = write_policy(
        tmp_path / "policy.yaml",
        [sim],
        [key],
        limits=f"{{backend: redis, on_backend_error: fail_closed, lease_s: {LEASE_S}}}",
        org_limits={"acme": f"{{tokens_per_min: {TOKENS}, concurrent: {SLOTS}}}"},
    )
    doomed = chat_body(LONG)
    doomed_cost = estimate_input_tokens(Kind.CHAT, doomed, BYTES_PER_TOKEN) + LONG
    probe = chat_body(PROBE_MAX, prompt="probe")
    probe_cost = estimate_input_tokens(Kind.CHAT, probe, BYTES_PER_TOKEN) + PROBE_MAX
    timeout = httpx.Timeout(10, read=30)

    async with httpx.AsyncClient(timeout=timeout) as client:
        # 1. A gateway with SLOTS long streams running: every slot and most of the tokens are held.
        with gateway(policy, redis_server.url, tmp_path / "gateway-1.log") as (url, proc):
            async with AsyncExitStack() as es:
                readers = []  # kept referenced: a collected line iterator would close its stream
                for _ in range(SLOTS):
                    resp = await open_stream(es, client, url, key.key, doomed)
                    assert resp.status_code == 200, await resp.aread()
                    # The first chunk: the stream really runs (the pool is generating).
                    readers.append(resp.aiter_lines())
                    assert (await anext(readers[-1])).startswith("data: ")
                held = await client.post(
                    f"{url}/v1/chat/completions",
                    json=probe,
                    headers={"authorization": f"Bearer {key.key}"},
                )
                assert held.status_code == 429, held.text
                assert "concurrent requests" in held.json()["error"]["message"], held.text
                remaining = int(held.headers["x-ratelimit-remaining-tokens"])
                assert remaining == TOKENS - SLOTS * doomed_cost, dict(held.headers)
                # Outlive one renewal round so the leases really are the renewed ones.
                await asyncio.sleep(LEASE_S / 2)
                os.kill(proc.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                proc.wait(timeout=5)
                dead = es.pop_all()
                with contextlib.suppress(httpx.HTTPError):
                    await dead.aclose()  # the streams died with the gateway

        # 2. A new gateway on the same Redis: refused while the dead leases live, then everything is free.
        with gateway(policy, redis_server.url, tmp_path / "gateway-2.log") as (url, _proc):
            started_after = time.monotonic() - killed_at
            refused_first = 0
            async with AsyncExitStack() as es:
                while True:
                    resp = await open_stream(es, client, url, key.key, probe)
                    if resp.status_code == 200:
                        freed_after = time.monotonic() - killed_at
                        break
                    assert resp.status_code == 429, await resp.aread()
                    await resp.aread()
                    refused_first += 1
                    held_tokens = TOKENS - int(resp.headers["x-ratelimit-remaining-tokens"])
                    assert held_tokens >= SLOTS * doomed_cost, dict(resp.headers)
                    assert time.monotonic() - killed_at < LEASE_S + 2, "the dead leases did not expire"
                    await asyncio.sleep(0.1)
                print(
                    f"\n[kill -9] lease_s {LEASE_S}: new gateway up {started_after:.1f} s after the kill, "
                    f"{refused_first} probes refused, budget free {freed_after:.1f} s after the kill"
                )
                # Within one lease of the kill (or at once, if the new gateway took longer to start).
                assert freed_after <= max(LEASE_S + 2, started_after + 1), (freed_after, started_after)
                # Nothing was charged for the killed requests: the first probe sees the full budget.
                first = int(resp.headers["x-ratelimit-remaining-tokens"])
                assert first == TOKENS - probe_cost, dict(resp.headers)
                # Every slot is free: SLOTS probes run at once (each a live lease), one more is refused.
                seen = [first]
                for _ in range(SLOTS - 1):
                    resp = await open_stream(es, client, url, key.key, probe)
                    assert resp.status_code == 200, await resp.aread()
                    seen.append(int(resp.headers["x-ratelimit-remaining-tokens"]))
                assert seen == [TOKENS - k * probe_cost for k in range(1, SLOTS + 1)], seen
                extra = await client.post(
                    f"{url}/v1/chat/completions",
                    json=probe,
                    headers={"authorization": f"Bearer {key.key}"},
                )
                assert extra.status_code == 429, extra.text
                assert "concurrent requests" in extra.json()["error"]["message"], extra.text
