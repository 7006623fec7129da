"""Redis goes away under load and comes back on the same port; the gateway is never restarted.

fail_open: every request keeps getting 200 (local approximate limiting, `llmgw_ratelimit_degraded 1`);
fail_closed: 503 with Retry-After, answered at once (no hang on a dead socket). Both return to exact
limiting by themselves once Redis answers again: `llmgw_ratelimit_degraded 0`, 200s, and a binding limit
refuses again.

The outage lasts OUTAGE_S = 20 s, as the issue asks.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, write_policy
from tests.support.prom import metric
from tests.support.redis_server import RedisServer

OUTAGE_S = 20.0
CLIENTS = 3
TIGHT_RPM = 5  # requests per minute of the key that shows exact limiting is back


@dataclass(frozen=True)
class Call:
    sent: float  # monotonic
    latency: float
    status: int
    retry_after: str | None
    body: str


def unary(max_tokens: int = 4) -> dict:
    return {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


async def load(client: httpx.AsyncClient, url: str, key: str, stop: asyncio.Event, calls: list[Call]) -> None:
    headers = {"authorization": f"Bearer {key}"}
    while not stop.is_set():
        t = time.monotonic()
        try:
            resp = await client.post(f"{url}/v1/chat/completions", json=unary(), headers=headers)
            status, retry, body = resp.status_code, resp.headers.get("retry-after"), resp.text[:300]
        except httpx.HTTPError as exc:
            status, retry, body = -1, None, repr(exc)
        calls.append(Call(t, time.monotonic() - t, status, retry, body))
        await asyncio.sleep(0.05)


async def scrape(client: httpx.AsyncClient, url: str) -> str:
    return (await client.get(f"{url}/metrics")).text


async def test_redis_outage_fail_open(tmp_path, redis_server: RedisServer, sims: SimFactory) -> None:
    await outage_and_recovery(tmp_path, redis_server, sims, "fail_open")


async def test_redis_outage_fail_closed(tmp_path, redis_server: RedisServer, sims: SimFactory) -> None:
    await outage_and_recovery(tmp_path, redis_server, sims, "fail_closed")


async def outage_and_recovery(tmp_path: Path, redis_server: RedisServer, sims: SimFactory, mode: str) -> None:
    sim = sims("sim", "--profile", "instant")
    light = TenantKey.new("light", "acme", "load")
    tight = TenantKey.new("tight", "acme", "probe", limits=f"{{requests_per_min: {TIGHT_RPM}}}")
    # Policy-declared keys (memory store): authentication does not need Redis during the outage.
    policy = write_policy(
        tmp_path / "policy.yaml",
        [sim],
        [light, tight],
        limits=f"{{backend: redis, on_backend_error: {mode}, lease_s: 5, "
        "tiers: {standard: {org: {requests_per_min: 100000}}}}",
    )

    calls: list[Call] = []
    stop = asyncio.Event()
    with gateway(policy, redis_server.url, tmp_path / "gateway.log") as (url, proc):
        async with httpx.AsyncClient(timeout=10) as client:
            tasks = [asyncio.create_task(load(client, url, light.key, stop, calls)) for _ in range(CLIENTS)]
            try:
                await asyncio.sleep(2)
                before = await scrape(client, url)
                assert metric(before, "llmgw_ratelimit_degraded") == 0

                redis_server.kill()
                down_at = time.monotonic()
                await asyncio.sleep(OUTAGE_S / 2)
                during = await scrape(client, url)
                await asyncio.sleep(OUTAGE_S / 2)
                redis_server.start()  # same port, empty data
                up_at = time.monotonic()

                # Recovery by itself: the failover limiter's probe finds Redis again. Recovered = not
                # degraded for 2 s in a row.
                first_ok = ok_since = recovered_at = None
                errors_at_first_ok = 0.0
                while recovered_at is None and time.monotonic() - up_at < 20:
                    sample = await scrape(client, url)
                    now = time.monotonic()
                    if metric(sample, "llmgw_ratelimit_degraded") == 1:
                        ok_since = None
                    else:
                        if first_ok is None:
                            first_ok = now
                            errors_at_first_ok = metric(sample, "llmgw_ratelimit_backend_errors_total")
                        ok_since = ok_since or now
                        if now - ok_since >= 2:
                            recovered_at = ok_since
                    await asyncio.sleep(0.1)
                assert recovered_at is not None, "not recovered 20 s after Redis came back"
                await asyncio.sleep(1)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            end = time.monotonic()
            assert proc.poll() is None, "the gateway died"

            # Exact limiting again: the tight key gets exactly TIGHT_RPM requests, then a 429 naming it.
            statuses = []
            for _ in range(TIGHT_RPM + 1):
                resp = await client.post(
                    f"{url}/v1/chat/completions",
                    json=unary(1),
                    headers={"authorization": f"Bearer {tight.key}"},
                )
                statuses.append(resp.status_code)
            assert statuses == [200] * TIGHT_RPM + [429], statuses
            assert "key 'tight' on requests per minute" in resp.json()["error"]["message"], resp.text
            final = await scrape(client, url)

    def phase(lo: float, hi: float) -> list[Call]:
        return [c for c in calls if lo <= c.sent and c.sent + c.latency <= hi]

    assert first_ok is not None
    pre, outage, post = phase(0, down_at), phase(down_at + 0.5, up_at), phase(recovered_at, end)
    refused_after_up = [c for c in calls if c.sent >= first_ok and c.status != 200]
    errors_after_up = metric(final, "llmgw_ratelimit_backend_errors_total") - errors_at_first_ok
    codes = sorted({c.status for c in calls})
    print(
        f"\n[outage {mode}] {len(calls)} calls ({len(pre)} before, {len(outage)} during the {OUTAGE_S:g} s "
        f"outage, {len(post)} after); statuses seen {codes}; first recovery "
        f"{first_ok - up_at:.1f} s, stable {recovered_at - up_at:.1f} s after Redis restarted; "
        f"max latency during the outage {max((c.latency for c in outage), default=0):.3f} s; "
        f"fail_open_activations {metric(final, 'llmgw_ratelimit_fail_open_activations_total'):g}, "
        f"recoveries {metric(final, 'llmgw_ratelimit_recoveries_total'):g}; after the first recovery: "
        f"{errors_after_up:g} backend errors, {len(refused_after_up)} non-200 answers"
    )
    assert len(pre) >= 5 and len(outage) >= 10 and len(post) >= 5, (len(pre), len(outage), len(post))
    assert all(c.status == 200 for c in pre), [c for c in pre if c.status != 200][:3]
    late = [c for c in post if c.status != 200]
    # No relapse: once Redis answered, it is not reported down again (e.g. by a stale pooled connection).
    assert not late, late[:3]
    assert errors_after_up == 0, errors_after_up
    assert metric(during, "llmgw_ratelimit_degraded") == 1
    assert metric(final, "llmgw_ratelimit_degraded") == 0
    assert metric(final, "llmgw_ratelimit_recoveries_total") >= 1
    if mode == "fail_open":
        assert all(c.status == 200 for c in calls), [c for c in calls if c.status != 200][:3]
        assert metric(during, "llmgw_ratelimit_fail_open_activations_total") > 0
        assert metric(during, "llmgw_ratelimit_degraded_decisions_total") > 0
    else:
        bad = [c for c in outage if c.status != 503 or not c.retry_after or int(c.retry_after) < 1]
        assert not bad, bad[:3]
        assert "rate limiter unavailable" in outage[0].body, outage[0].body
        slow = [c for c in outage if c.latency >= 1.0]
        assert not slow, slow[:3]
