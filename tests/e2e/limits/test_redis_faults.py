"""Redis faults that are not a clean outage, each against a real gateway and a real redis-server:
out of memory (maxmemory + noeviction), a rotated password (the gateway's is now wrong), the server
frozen by SIGSTOP for 20 s, a restart (SHUTDOWN SAVE, data kept).

For each: clients get the configured failure mode, never uvicorn's text/plain 500 (fail_open: 200;
fail_closed: a 503 JSON body in the OpenAI error shape); a long stream in flight across the fault keeps
its lease (the renewer survives: its lease is extended again after the fault) and is charged its
usage when it ends; nothing is leaked afterwards (no lease record left in Redis once every request
ended and `lease_s` passed). Keys are policy-declared (static): the key store needs no Redis.

Each test prints its figures (statuses per phase) for `pytest -s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from tests.e2e.limits.conftest import SimFactory, gateway
from tests.support.limits_stack import (
    PREFIX,
    StreamResult,
    TenantKey,
    base_key,
    chat_body,
    live_leases,
    stream_chat,
    sub_window_counters,
    write_policy,
)
from tests.support.poll import wait_until_async
from tests.support.prom import metric
from tests.support.redis_server import RedisServer

PASSWORD = "gateway-secret"


@dataclass(frozen=True)
class Call:
    sent: float
    status: int
    json_error: bool  # a non-200 answer in the OpenAI error shape
    body: str
    done: float = 0.0  # when its answer arrived


async def load(client: httpx.AsyncClient, url: str, key: str, stop: asyncio.Event, calls: list[Call]) -> None:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    while not stop.is_set():
        t = time.monotonic()
        try:
            resp = await client.post(
                f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
            )
            status, text, ctype = resp.status_code, resp.text, resp.headers.get("content-type", "")
        except httpx.HTTPError as exc:
            status, text, ctype = -1, repr(exc), ""
        shaped = False
        if status != 200 and ctype.startswith("application/json"):
            err = orjson.loads(text).get("error", {})
            shaped = isinstance(err, dict) and {"message", "type", "param", "code"} <= err.keys()
        calls.append(Call(t, status, shaped, text[:200], time.monotonic()))
        await asyncio.sleep(0.05)


def stream_lease(r: redis.Redis, streamer: str) -> tuple[str, float] | None:
    """(request id, lease expiry) of the streamer key's one lease, if Redis holds it."""
    needle = base_key("key", streamer, "tokens").encode()
    for name, spec in r.hgetall(f"{PREFIX}:lh").items():
        if name.startswith(b"@") and needle in spec:
            rid = name[1:].decode()
            score = r.zscore(f"{PREFIX}:leases", rid)
            if score is not None:
                return rid, score
    return None


@dataclass
class Fault:
    name: str
    mode: str
    lease_s: float
    fault_s: float
    stream_tokens: int  # 20 ms each: the stream must outlast the fault and one renewal after it
    reason: str  # what llmgw_ratelimit_backend_errors_total must name
    inject: Callable[[], None]
    heal: Callable[[], None]


async def run_fault(
    tmp_path: Path, server: RedisServer, sims: SimFactory, fault: Fault, url_auth: str = ""
) -> None:
    sim = sims("sim", "--profile", "instant", "--step-base-ms", "20")
    light = TenantKey.new("light", "acme", "load")
    streamer = TenantKey.new("streamer", "acme", "long", limits="{tokens_per_min: 10000000}")
    policy = write_policy(
        tmp_path / "policy.yaml",
        [sim],
        [light, streamer],
        limits=f"{{backend: redis, on_backend_error: {fault.mode}, lease_s: {fault.lease_s:g}, "
        "tiers: {standard: {org: {requests_per_min: 100000}}}}",
    )
    r = redis.Redis(port=server.port, password=url_auth or None, single_connection_client=True)
    redis_url = f"redis://:{url_auth}@127.0.0.1:{server.port}/0" if url_auth else server.url
    calls: list[Call] = []
    stop = asyncio.Event()
    marks: dict[str, float] = {}
    with gateway(policy, redis_url, tmp_path / "gateway.log") as (url, proc):
        async with httpx.AsyncClient(timeout=60) as client:
            body = chat_body(fault.stream_tokens, ignore_eos=True)
            stream = asyncio.create_task(stream_chat(client, url, streamer.key, body))
            tasks = [asyncio.create_task(load(client, url, light.key, stop, calls)) for _ in range(3)]
            try:
                await wait_until_async(
                    lambda: stream_lease(r, streamer.id) is not None, "the stream's lease", timeout=10
                )
                await asyncio.sleep(2)
                fds_before = len(os.listdir(f"/proc/{proc.pid}/fd"))
                lease = stream_lease(r, streamer.id)
                assert lease is not None
                marks["fault"] = time.monotonic()
                fault.inject()
                await asyncio.sleep(fault.fault_s)
                fds_during = len(os.listdir(f"/proc/{proc.pid}/fd"))
                fault.heal()
                marks["heal"] = time.monotonic()
                await wait_until_async(
                    lambda: metric(httpx.get(f"{url}/metrics").text, "llmgw_ratelimit_degraded") == 0,
                    "recovery (llmgw_ratelimit_degraded 0) after the fault ended",
                    timeout=20,
                )
                marks["recovered"] = time.monotonic()
                # The renewer survived: the stream's lease is extended again after the fault (an expiry
                # later than one lease from now was set after the fault ended).
                after_ms = (time.time() + fault.lease_s) * 1000
                renewed = await wait_until_async(
                    lambda: (now := stream_lease(r, streamer.id)) is not None and now[1] > after_ms,
                    "the stream's lease renewed after the fault (is the renewer gone?)",
                    timeout=fault.lease_s,
                )
                marks["renewed"] = time.monotonic()
                await asyncio.sleep(2)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            result: StreamResult = await stream
            # Settled: the stream's usage is in its key's window.
            used = result.usage["total_tokens"] if result.usage else 1

            def charged() -> int:
                return sum(sub_window_counters(r, base_key("key", streamer.id, "tokens")).values())

            await wait_until_async(
                lambda: charged() >= used, lambda: f"{used} tokens charged: {charged()}", timeout=10
            )
            metrics_text = (await client.get(f"{url}/metrics")).text

            # Nothing leaked: once every request ended and a lease passed, no lease record is left
            # (an admission purges expired ones: one request now and then).
            async def poke() -> None:
                await client.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1},
                    headers={"authorization": f"Bearer {light.key}"},
                )

            leaked: dict[str, int] = {}

            async def no_lease_left() -> bool:
                nonlocal leaked
                await poke()
                await asyncio.sleep(0.3)
                leaked = live_leases(r)
                return not leaked

            await wait_until_async(
                no_lease_left, lambda: f"no lease left: {leaked}", timeout=fault.lease_s + 10, interval=1
            )
            assert proc.poll() is None, "the gateway died"

    def phase(lo: float, hi: float) -> list[Call]:
        return [c for c in calls if lo <= c.sent < hi]

    phases = {
        # Answered before the fault: a call in flight when it struck (one per load task) meets it.
        "before": [c for c in calls if c.done < marks["fault"]],
        "fault": phase(marks["fault"] + 0.5, marks["heal"]),
        "after": phase(marks["recovered"], float("inf")),
    }
    errors = {
        k[len("llmgw_ratelimit_backend_errors_total{") : -1]: float(v)
        for line in metrics_text.splitlines()
        if line.startswith("llmgw_ratelimit_backend_errors_total{")
        for k, v in [line.rsplit(" ", 1)]
    }
    print(f"\n[{fault.name} {fault.mode}] lease_s {fault.lease_s:g}, fault {fault.fault_s:g} s")
    print(f"  {'phase':<8}{'calls':>7}  statuses")
    for name, cs in phases.items():
        print(f"  {name:<8}{len(cs):>7}  {dict(sorted(Counter(c.status for c in cs).items()))}")
    print(
        f"  recovered {marks['recovered'] - marks['heal']:.1f} s after the fault ended; stream lease "
        f"renewed {marks['renewed'] - marks['heal']:.1f} s after; stream {result.status}, usage "
        f"{result.usage and result.usage['total_tokens']}, charged {charged()}; gateway fds "
        f"{fds_before} before, {fds_during} at the end of the fault; leases left {len(leaked)}"
    )
    print(f"  backend errors {errors}")

    assert len(phases["before"]) >= 5 and len(phases["fault"]) >= 5 and len(phases["after"]) >= 5
    everything = calls  # the calls that met a fault edge too
    assert all(c.status == 200 for c in phases["before"] + phases["after"]), [
        c for c in phases["before"] + phases["after"] if c.status != 200
    ][:3]
    bad = [c for c in everything if c.status != 200 and not (c.status == 503 and c.json_error)]
    assert not bad, bad[:3]  # never a text/plain 500, never a 429 of a broken limiter
    if fault.mode == "fail_open":
        assert all(c.status == 200 for c in phases["fault"]), [c for c in phases["fault"] if c.status != 200][
            :3
        ]
    else:
        refused = [c for c in phases["fault"] if c.status == 503]
        assert refused and all("rate limiter unavailable" in c.body for c in refused), refused[:1]
    assert renewed, "the stream's lease was not renewed after the fault: the renewer is gone"
    assert result.status == 200 and result.usage is not None, result
    assert charged() >= result.usage["total_tokens"], (charged(), result.usage)
    assert not leaked, leaked
    assert fds_during <= fds_before + 5, (fds_before, fds_during)  # no socket per failed AUTH
    assert errors.get(f'op="admit",reason="{fault.reason}"', 0) > 0, errors


MODES = ["fail_open", "fail_closed"]


@pytest.mark.parametrize("mode", MODES)
async def test_out_of_memory(tmp_path: Path, redis_server: RedisServer, sims: SimFactory, mode: str) -> None:
    admin = redis.Redis(port=redis_server.port)

    def inject() -> None:
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)

    fault = Fault("maxmemory", mode, 15, 6, 1000, "oom", inject, lambda: admin.config_set("maxmemory", 0))
    await run_fault(tmp_path, redis_server, sims, fault)


@pytest.mark.parametrize("mode", MODES)
async def test_rotated_password(
    tmp_path: Path, redis_server: RedisServer, sims: SimFactory, mode: str
) -> None:
    """The gateway's password is right at first; Redis rotates it and drops the connections, so the
    gateway's is wrong (WRONGPASS on every reconnect) until Redis takes it back."""
    admin = redis.Redis(port=redis_server.port, single_connection_client=True)
    admin.config_set("requirepass", PASSWORD)  # this connection stays authenticated

    def inject() -> None:
        admin.config_set("requirepass", "rotated")
        admin.client_kill_filter(_type="normal", skipme=True)

    fault = Fault(
        "password", mode, 15, 6, 1000, "auth", inject, lambda: admin.config_set("requirepass", PASSWORD)
    )
    await run_fault(tmp_path, redis_server, sims, fault, url_auth=PASSWORD)


@pytest.mark.parametrize("mode", MODES)
async def test_sigstop_20s(tmp_path: Path, redis_server: RedisServer, sims: SimFactory, mode: str) -> None:
    assert redis_server.proc is not None
    pid = redis_server.proc.pid
    # lease_s 45: renewed every 15 s, a lease outlives the 20 s freeze.
    fault = Fault(
        "SIGSTOP",
        mode,
        45,
        20,
        2500,
        "timeout",
        lambda: os.kill(pid, signal.SIGSTOP),
        lambda: os.kill(pid, signal.SIGCONT),
    )
    try:
        await run_fault(tmp_path, redis_server, sims, fault)
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_restart(tmp_path: Path, redis_server: RedisServer, sims: SimFactory) -> None:
    """SHUTDOWN SAVE, then the same server again on the same port: data kept, scripts gone (NOSCRIPT)."""

    def inject() -> None:
        with contextlib.suppress(redis.ConnectionError):
            redis.Redis(port=redis_server.port).shutdown(save=True)
        assert redis_server.proc is not None
        redis_server.proc.wait()
        redis_server.proc = None

    fault = Fault("restart", "fail_closed", 15, 4, 1000, "connection", inject, redis_server.start)
    await run_fault(tmp_path, redis_server, sims, fault)
