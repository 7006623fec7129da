"""The key store's Redis freezes (`kill -STOP` for 20 s) under load, then thaws; the gateway keeps running.

Store keys live in Redis (`tenancy.store: redis`), and so does the limiter (`on_backend_error:
fail_open`). During the outage a key this gateway looked up before keeps being served (200) from the
stale key cache, a key it never saw gets 503 `key_store_unavailable` in the OpenAI JSON shape (never a
text/plain 500), and `llmgw_auth_key_store_degraded` is 1. Once Redis answers again the gauge returns to
0 by itself, and unknown keys are plain 401s again (issue 24, items 4 and 5 of its acceptance).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from gateway.tenancy.keys import generate_key
from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import TenantKey, write_policy
from tests.support.prom import metric
from tests.support.redis_server import RedisServer

OUTAGE_S = 20.0
ADMIN = "adm-" + generate_key()


@dataclass(frozen=True)
class Call:
    who: str  # "known" | "unknown"
    sent: float
    latency: float
    status: int
    content_type: str
    code: str | None


def chat() -> dict:
    return {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def send(client: httpx.AsyncClient, url: str, who: str, key: str, calls: list[Call]) -> None:
    t = time.monotonic()
    try:
        resp = await client.post(
            f"{url}/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {key}"}
        )
        ctype = resp.headers.get("content-type", "")
        code = resp.json()["error"]["code"] if resp.status_code >= 400 and "json" in ctype else None
        status = resp.status_code
    except httpx.HTTPError as exc:
        status, ctype, code = -1, "", repr(exc)
    calls.append(Call(who, t, time.monotonic() - t, status, ctype, code))


async def load(
    client: httpx.AsyncClient, url: str, known: str, stop: asyncio.Event, calls: list[Call]
) -> None:
    while not stop.is_set():
        # A new key every time: never seen by this gateway, so only the store could vouch for it.
        await asyncio.gather(
            send(client, url, "known", known, calls), send(client, url, "unknown", generate_key(), calls)
        )
        await asyncio.sleep(0.1)


async def create_store_key(client: httpx.AsyncClient, url: str) -> str:
    resp = await client.post(
        f"{url}/admin/keys",
        json={"org": "acme", "app": "faults", "id": "stored"},
        headers={"authorization": f"Bearer {ADMIN}"},
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["key"])


async def test_known_keys_survive_a_frozen_key_store(
    tmp_path: Path, redis_server: RedisServer, sims: SimFactory
) -> None:
    sim = sims("sim", "--profile", "instant")
    ops = TenantKey.new("ops", "acme", "ops")  # a policy key, so the policy has one; not used below
    policy = write_policy(
        tmp_path / "policy.yaml",
        [sim],
        [ops],
        limits="{backend: redis, on_backend_error: fail_open, "
        "tiers: {standard: {key: {requests_per_min: 100000}}}}",
        store="redis",
    )
    calls: list[Call] = []
    stop = asyncio.Event()
    env = {"LLMGW_ADMIN_KEY": ADMIN}
    assert redis_server.proc is not None
    pid = redis_server.proc.pid
    with gateway(policy, redis_server.url, tmp_path / "gateway.log", env=env) as (url, proc):
        async with httpx.AsyncClient(timeout=15) as client:
            known = await create_store_key(client, url)
            task = asyncio.create_task(load(client, url, known, stop, calls))
            try:
                await asyncio.sleep(3)
                os.kill(pid, signal.SIGSTOP)
                down_at = time.monotonic()
                await asyncio.sleep(OUTAGE_S / 2)
                during = (await client.get(f"{url}/metrics")).text
                await asyncio.sleep(OUTAGE_S / 2)
            finally:
                os.kill(pid, signal.SIGCONT)
            up_at = time.monotonic()
            try:
                recovered = None
                while recovered is None and time.monotonic() - up_at < 20:
                    sample = (await client.get(f"{url}/metrics")).text
                    if metric(sample, "llmgw_auth_key_store_degraded") == 0:
                        recovered = time.monotonic()
                    await asyncio.sleep(0.1)
                assert recovered is not None, "the key store stayed degraded 20 s after Redis thawed"
                await asyncio.sleep(3)
            finally:
                stop.set()
                await task
            end = time.monotonic()
            final = (await client.get(f"{url}/metrics")).text
            assert proc.poll() is None, "the gateway died"

    phases = {
        "before": (0.0, down_at),
        "outage": (down_at + 1.5, up_at),  # after the first lookups noticed the freeze
        "after": (recovered, end),
    }

    def of(phase: str, who: str) -> list[Call]:
        lo, hi = phases[phase]
        return [c for c in calls if c.who == who and lo <= c.sent and c.sent + c.latency <= hi]

    print(f"\n[key store frozen {OUTAGE_S:g} s, fail_open] recovered {recovered - up_at:.1f} s after SIGCONT")
    for phase in phases:
        for who in ("known", "unknown"):
            got = of(phase, who)
            counts = dict(Counter(c.status for c in got))
            slowest = max((c.latency for c in got), default=0.0)
            print(
                f"  {phase:<7} {who:<8} {len(got):4d} calls  statuses {counts}  max latency {slowest:.3f} s"
            )
    degraded = "llmgw_auth_key_store_degraded"
    print(
        f"  stale-served {metric(final, 'llmgw_auth_stale_keys_total'):g}, degraded gauge during the outage "
        f"{metric(during, degraded):g}, at the end {metric(final, degraded):g}"
    )
    for phase in phases:
        assert len(of(phase, "known")) >= 5, (phase, len(of(phase, "known")))
    assert all(c.status == 200 for c in calls if c.who == "known"), [
        c for c in calls if c.who == "known" and c.status != 200
    ][:3]
    assert all(c.status == 401 for c in of("before", "unknown") + of("after", "unknown"))
    outage = of("outage", "unknown")
    bad = [
        c
        for c in outage
        if (c.status, c.code) != (503, "key_store_unavailable") or "json" not in c.content_type
    ]
    assert not bad, bad[:3]
    # No request at all ever got the server's text/plain 500.
    assert not [c for c in calls if c.status >= 500 and "json" not in c.content_type]
    assert metric(during, "llmgw_auth_key_store_degraded") == 1
    assert metric(during, "llmgw_auth_stale_keys_total") > 0
    assert metric(final, "llmgw_auth_key_store_degraded") == 0
