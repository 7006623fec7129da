"""`python -m eval.bench.redis_fill` (`make bench-redis-fill`): routed traffic with feedback records and
cached answers into a Redis with a small `maxmemory` until its growth stops; the limiter must never see
OOM, budgets must hold and keys must still be created (issue 39's red-team finding: the chart's 256 MB
`noeviction` Redis filled at ~76 routed req/s, then a 3,000 tokens/min key was admitted 5,800).

The stack: one real `redis-server` (`--maxmemory`, `noeviction`), one simulator behind two pools, two
gateway replicas sharing Redis for the limiter, the key store, feedback records and the exact cache. A
routed alias `auto` (difficulty router, cache on) gets unique prompts from an unlimited key at
concurrency 16, alternating replicas: every answer leaves a delivered-answer record (~1 KB with the
router's extra) and a cached answer. Beside it a key with `tokens_per_min: BUDGET` asks as fast as it
may. The per-minute window is shortened (`limits.sub_window_s: 0.5`: a 6 s window) so that a run sees
many windows. Redis is read every second (`INFO memory`, `INFO errorstats`); the run ends `--settle`
seconds after used memory stopped growing (or at `--max-seconds`). Then a key is created through the
admin API on one replica and used on the other.

Printed: Redis used/max, OOM errors Redis answered (errorstat_OOM), records and answers the gateways
dropped for want of room, and the budgeted key's most tokens in any 6 s window over its budget (the
limiter allows at most one reservation per replica beyond it: the printed bound). `--ratio 1.0` turns
the room check off (growth may fill Redis): the failure the change removed.
A report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from eval.bench.procs import free_port, metric_sum, redis_args, redis_server, spawned
from gateway.tenancy.keys import generate_key, hash_key

WINDOW_S = 6.0  # 12 sub-windows of 0.5 s
MAX_TOKENS = 16


@dataclass
class Run:
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    budgeted: list[tuple[float, int]] = field(default_factory=list)  # (done at, total tokens) of 200s
    memory: list[tuple[float, int]] = field(default_factory=list)
    oom_errors: int = 0
    maxmemory: int = 0

    def count(self, who: str, status: int) -> None:
        by = self.statuses.setdefault(who, {})
        by[status] = by.get(status, 0) + 1


def _policy(sim: str, budget: int, ratio: float) -> str:
    return f"""\
pools:
  - {{name: small, model: sim, endpoints: {{static: ["{sim}"]}}}}
  - {{name: large, model: sim, endpoints: {{static: ["{sim}"]}}}}
models:
  - name: auto
    route: {{policy: {{tiers: [{{pool: small}}, {{pool: large}}], difficulty: {{thresholds: [0.5]}}}}}}
    max_tokens: {{default: {MAX_TOKENS}, cap: {MAX_TOKENS}}}
    cache: {{ttl_s: 3600}}
limits:
  backend: redis
  sub_window_s: 0.5
  growth_max_memory_ratio: {ratio}
cache: {{backend: redis}}
tenancy:
  store: redis
  keys:
    - {{id: filler, sha256: {{filler}}, org: filler, app: load}}
    - {{id: budgeted, sha256: {{budgeted}}, org: acme, app: app, limits: {{tokens_per_min: {budget}}}}}
"""


def _redis_state(r: redis.Redis) -> tuple[int, int, int]:
    mem: Any = r.info("memory")
    errs: Any = r.info("errorstats")
    oom = errs.get("errorstat_OOM", {})
    return (
        int(mem["used_memory"]),
        int(mem["maxmemory"]),
        int(oom.get("count", 0) if isinstance(oom, dict) else 0),
    )


async def _filler(
    urls: Sequence[str], key: str, run: Run, stop: asyncio.Event, n: itertools.count[int]
) -> None:
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            i = next(n)
            prompt = f"Question {i}: explain briefly why the number {i * 7919} is or is not prime."
            body = {"model": "auto", "messages": [{"role": "user", "content": prompt}], "temperature": 0}
            try:
                resp = await client.post(f"{urls[i % 2]}/v1/chat/completions", json=body, headers=headers)
                run.count("filler", resp.status_code)
            except httpx.HTTPError:
                run.count("filler", 0)


async def _budgeted(
    urls: Sequence[str], key: str, run: Run, stop: asyncio.Event, n: itertools.count[int]
) -> None:
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            i = next(n)
            body = {
                "model": "auto",
                "messages": [{"role": "user", "content": f"Budgeted {i}: say something."}],
                "max_tokens": MAX_TOKENS,
                "temperature": 0.7,  # not cached: every admitted request spends tokens
            }
            try:
                resp = await client.post(f"{urls[i % 2]}/v1/chat/completions", json=body, headers=headers)
            except httpx.HTTPError:
                run.count("budgeted", 0)
                continue
            run.count("budgeted", resp.status_code)
            if resp.status_code == 200:
                run.budgeted.append((time.monotonic(), int(resp.json()["usage"]["total_tokens"])))
            elif resp.status_code == 429:
                await asyncio.sleep(0.05)


async def _drive(urls: Sequence[str], keys: dict[str, str], r: redis.Redis, opts: argparse.Namespace) -> Run:
    run = Run()
    stop = asyncio.Event()
    n = itertools.count()
    tasks = [
        asyncio.create_task(_filler(urls, keys["filler"], run, stop, n)) for _ in range(opts.concurrency)
    ]
    tasks += [asyncio.create_task(_budgeted(urls, keys["budgeted"], run, stop, n)) for _ in range(4)]
    t0 = time.monotonic()
    peak, still_since = 0, time.monotonic()
    while time.monotonic() - t0 < opts.max_seconds:
        await asyncio.sleep(1.0)
        used, run.maxmemory, run.oom_errors = await asyncio.to_thread(_redis_state, r)
        run.memory.append((time.monotonic() - t0, used))
        if used > peak * 1.01:
            peak, still_since = max(peak, used), time.monotonic()
        elif time.monotonic() - still_since >= opts.settle:
            break
        print(
            f"[{time.monotonic() - t0:5.0f}s] redis {used / 2**20:6.2f} of {run.maxmemory / 2**20:.0f} MiB, "
            f"OOM errors {run.oom_errors}, statuses {run.statuses}",
            file=sys.stderr,
            flush=True,
        )
    stop.set()
    await asyncio.gather(*tasks)
    return run


def worst_window(done: list[tuple[float, int]]) -> int:
    """The most tokens the budgeted key was answered in any WINDOW_S interval (`done`: (time, tokens)
    in time order; also eval.bench.redis_failover's)."""
    times = [t for t, _ in done]
    sums = list(itertools.accumulate(tok for _, tok in done))
    worst = 0
    for i, t in enumerate(times):
        j = bisect.bisect_right(times, t + WINDOW_S) - 1
        worst = max(worst, sums[j] - (sums[i - 1] if i else 0))
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench.redis_fill", description=__doc__.split("\n")[0])
    p.add_argument("--maxmemory", default="16mb", help="Redis maxmemory (default 16mb)")
    p.add_argument(
        "--ratio", type=float, default=0.7, help="limits.growth_max_memory_ratio (1.0: no room check)"
    )
    p.add_argument("--budget", type=int, default=3000, help="the budgeted key's tokens per (6 s) window")
    p.add_argument("--concurrency", type=int, default=16, help="filler requests in flight")
    p.add_argument("--settle", type=float, default=15.0, help="seconds of flat Redis memory that end the run")
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    opts = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-redis-fill-"))
    keys = {"filler": generate_key(), "budgeted": generate_key()}
    admin = generate_key()
    rport, sport = free_port(), free_port()
    rurl = f"redis://127.0.0.1:{rport}/0"
    policy = work / "policy.yaml"
    text = _policy(f"http://127.0.0.1:{sport}", opts.budget, opts.ratio)
    policy.write_text(
        text.replace("{filler}", hash_key(keys["filler"])).replace("{budgeted}", hash_key(keys["budgeted"]))
    )
    env = {"LLMGW_REDIS_URL": rurl, "LLMGW_ADMIN_KEY": admin, "LLMGW_LOG_LEVEL": "warning"}
    with ExitStack() as stack:
        args = [
            *redis_args(redis_server(), rport),
            "--maxmemory",
            opts.maxmemory,
            "--maxmemory-policy",
            "noeviction",
        ]
        stack.enter_context(spawned(args, None, rurl, work / "redis.log"))
        sim = [sys.executable, "-m", "gateway", "sim", "--port", str(sport), "--served-model-name", "sim"]
        sim += ["--profile", "instant"]
        stack.enter_context(spawned(sim, None, f"http://127.0.0.1:{sport}/health", work / "sim.log"))
        urls = []
        for i in range(2):
            port = free_port()
            gw = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)]
            stack.enter_context(
                spawned(gw, None, f"http://127.0.0.1:{port}/healthz", work / f"gw{i}.log", env, timeout=120)
            )
            urls.append(f"http://127.0.0.1:{port}")
        r = redis.Redis.from_url(rurl)
        run = asyncio.run(_drive(urls, keys, r, opts))
        created = httpx.post(
            f"{urls[0]}/admin/keys",
            json={"org": "late", "app": "a"},
            headers={"authorization": f"Bearer {admin}"},
            timeout=10,
        )
        used_ok = None
        if created.status_code == 201:
            new = created.json()["key"]
            probe = httpx.get(f"{urls[1]}/v1/models", headers={"authorization": f"Bearer {new}"}, timeout=10)
            used_ok = probe.status_code
        pages = [httpx.get(f"{u}/metrics", timeout=10).text for u in urls]
        used, maxmemory, oom = _redis_state(r)
    worst = worst_window(run.budgeted)
    bound = opts.budget + 2 * (MAX_TOKENS + 64)  # one reservation per replica: prompt estimate + output cap
    figures = {
        "maxmemory": maxmemory,
        "used_memory": used,
        "peak_used_memory": max((u for _, u in run.memory), default=used),
        "oom_errors": oom,
        "seconds": run.memory[-1][0] if run.memory else 0,
        "statuses": run.statuses,
        "feedback_records_dropped": sum(
            metric_sum(pg, "llmgw_feedback_dropped_records_total") for pg in pages
        ),
        "cache_writes_without_room": sum(
            float(line.rsplit(" ", 1)[1])
            for pg in pages
            for line in pg.splitlines()
            if line.startswith('llmgw_cache_errors_total{op="no_room"}')
        ),
        "budget": opts.budget,
        "worst_window_tokens": worst,
        "admitted_over_budget": round(worst / opts.budget, 3),
        "allowed_over_budget": round(bound / opts.budget, 3),
        "key_created": created.status_code,
        "new_key_used": used_ok,
        "ratio": opts.ratio,
    }
    print(
        f"Redis {figures['peak_used_memory'] / 2**20:.2f} MiB peak of {maxmemory / 2**20:.0f} MiB "
        f"(growth ratio {opts.ratio}), {figures['seconds']:.0f} s, OOM errors answered by Redis: {oom}\n"
        f"requests: {run.statuses}\n"
        f"dropped for want of room: {figures['feedback_records_dropped']:.0f} feedback records, "
        f"{figures['cache_writes_without_room']:.0f} cached answers\n"
        f"budgeted key: most tokens in a {WINDOW_S:.0f} s window {worst} of {opts.budget} = "
        f"{figures['admitted_over_budget']:.3f}x (one reservation per replica allows "
        f"{figures['allowed_over_budget']:.3f}x)\n"
        f"admin API after the fill: create {created.status_code}, the new key on the other replica {used_ok}"
    )
    if opts.out is not None:
        opts.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
