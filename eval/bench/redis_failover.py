"""`python -m eval.bench.redis_failover` (`make bench-redis-failover`): two gateways admitting concurrent
streams against a small budget while the Redis primary is killed (issue 41). A report, not a test.

Topologies (real processes, tests/support/redis_topologies.py): `--topology sentinel` (a primary, one
replica, three sentinels; the gateways find the primary through the sentinels) or `cluster` (three
primaries with one replica each; the primary of the limiter's slot is the one killed). One simulator
(paced, so streams overlap), two gateway processes with `limits.backend: redis`, `tenancy.store: redis`.

Load: `--concurrency` streams in flight, alternating gateways, from a key with `tokens_per_min:
--budget` over a shortened window (`limits.sub_window_s: 0.5`: 6 s), `--seconds` long; the primary is
killed (SIGKILL) at `--kill-at`. Every request's end time, status and usage is kept.

Printed:
- requests that failed (anything but 200 and the budget's 429; a connection error counts) in all, and
  during the switch;
- seconds to recover: from the kill to the first 200 after which nothing failed for 3 s;
- the budgeted key's most tokens answered in any 6 s window, over the budget (the overshoot ratio),
  and the bound the design states (docs/design/004: one reservation per gateway beyond the budget, plus
  what an asynchronous replica had not yet received when the primary died);
- concurrency slots held after `lease_s`: once the load ended and `lease_s` passed, a key limited to
  `CONCURRENT` streams at once opens that many at once; the ones refused are slots still held.
The failure mode is the policy's `limits.on_backend_error` (`--mode`, default fail_closed, so failures
show as 503s rather than unmetered admissions).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from eval.bench.procs import free_port, spawned
from eval.bench.redis_fill import WINDOW_S, worst_window
from gateway.tenancy.keys import generate_key, hash_key
from tests.support.redis_topologies import RedisCluster, SentinelGroup

MAX_TOKENS = 48
CONCURRENT = 4
LIMITER_TAG = "{llmgw"  # every limiter key starts with its hash tag (ratelimit.keys)


@dataclass
class Run:
    done: list[tuple[float, int, int]] = field(default_factory=list)  # (end, status, tokens)
    statuses: Counter[int] = field(default_factory=Counter)


def _policy(sim: str, budget: int, mode: str, lease_s: float) -> str:
    return f"""\
pools:
  - {{name: p, model: sim, endpoints: {{static: ["{sim}"]}}}}
models:
  - {{name: m, route: {{pool: p}}, max_tokens: {{default: {MAX_TOKENS}, cap: {MAX_TOKENS}}}}}
limits:
  backend: redis
  sub_window_s: 0.5
  lease_s: {lease_s}
  on_backend_error: {mode}
tenancy:
  store: redis
  keys:
    - {{id: budgeted, sha256: {{budgeted}}, org: acme, app: app, limits: {{tokens_per_min: {budget}}}}}
    - {{id: slots, sha256: {{slots}}, org: slots, app: app, limits: {{concurrent: {CONCURRENT}}}}}
"""


async def _stream(client: httpx.AsyncClient, url: str, key: str, i: int) -> tuple[int, int]:
    """(status, total tokens) of one streamed chat request (0: the connection failed)."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"Stream {i}: tell me something."}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens = 0
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
        ) as resp:
            if resp.status_code != 200:
                await resp.aread()
                return resp.status_code, 0
            async for line in resp.aiter_lines():
                if line.startswith("data: {") and '"usage"' in line:
                    usage = json.loads(line[6:]).get("usage")
                    if isinstance(usage, dict):
                        tokens = int(usage.get("total_tokens") or tokens)
                if line.startswith("data: {") and '"error"' in line:
                    return 599, tokens  # the stream ended with an error event
    except httpx.HTTPError:
        return 0, 0
    return 200, tokens


async def _drive(urls: Sequence[str], key: str, opts: argparse.Namespace, kill: Any) -> tuple[Run, float]:
    run = Run()
    n = itertools.count()
    t0 = time.monotonic()
    killed_at = -1.0

    async def worker() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            while time.monotonic() - t0 < opts.seconds:
                i = next(n)
                status, tokens = await _stream(client, urls[i % 2], key, i)
                run.done.append((time.monotonic() - t0, status, tokens))
                run.statuses[status] += 1
                if status in (429, 503):
                    await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(worker()) for _ in range(opts.concurrency)]
    await asyncio.sleep(opts.kill_at)
    killed_at = time.monotonic() - t0
    victim = await asyncio.to_thread(kill)
    print(f"[{killed_at:5.1f}s] killed the primary {victim}", file=sys.stderr, flush=True)
    while time.monotonic() - t0 < opts.seconds:
        await asyncio.sleep(2.0)
        print(f"[{time.monotonic() - t0:5.1f}s] statuses {dict(run.statuses)}", file=sys.stderr, flush=True)
    await asyncio.gather(*tasks)
    run.done.sort()
    return run, killed_at


def _recovery(done: list[tuple[float, int, int]], killed_at: float) -> tuple[int, float | None]:
    """(failed requests after the kill, seconds from the kill to the first 200 after which nothing
    failed for 3 s; None if that never happened)."""
    failed = [t for t, status, _ in done if status not in (200, 429)]
    after = [t for t in failed if t >= killed_at]
    last_fail = max(after, default=None)
    if last_fail is None:
        return 0, 0.0
    ok_after = [t for t, status, _ in done if status == 200 and t > last_fail]
    end = done[-1][0] if done else 0.0
    if not ok_after or end - last_fail < 3.0:
        return len(after), None
    return len(after), round(ok_after[0] - killed_at, 2)


async def _slots_held(urls: Sequence[str], key: str) -> int:
    """Open CONCURRENT streams at once with a key limited to that many: the refused are held slots."""
    async with httpx.AsyncClient(timeout=30) as client:
        results = await asyncio.gather(*(_stream(client, urls[i % 2], key, i) for i in range(CONCURRENT)))
    return sum(1 for status, _ in results if status == 429)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.redis_failover", description=__doc__.split("\n")[0]
    )
    p.add_argument("--topology", choices=("sentinel", "cluster"), default="sentinel")
    p.add_argument("--mode", choices=("fail_open", "fail_closed"), default="fail_closed")
    p.add_argument("--budget", type=int, default=4000, help="the budgeted key's tokens per 6 s window")
    p.add_argument("--concurrency", type=int, default=16, help="streams in flight")
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--kill-at", type=float, default=12.0)
    p.add_argument("--lease-s", type=float, default=5.0, help="limits.lease_s")
    p.add_argument("--out", type=Path, help="also write the figures as JSON here")
    opts = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-redis-failover-"))
    keys = {"budgeted": generate_key(), "slots": generate_key()}
    sport = free_port()
    policy = work / "policy.yaml"
    text = _policy(f"http://127.0.0.1:{sport}", opts.budget, opts.mode, opts.lease_s)
    for name, key in keys.items():
        text = text.replace("{" + name + "}", hash_key(key))
    policy.write_text(text)
    with ExitStack() as stack:
        topo: SentinelGroup | RedisCluster
        if opts.topology == "sentinel":
            group = SentinelGroup(work / "redis")
            stack.enter_context(group)
            topo, kill = group, group.kill_primary
        else:
            cluster = RedisCluster(work / "redis", replicas_per_primary=1)
            stack.enter_context(cluster)
            topo = cluster

            def kill() -> str:
                return cluster.kill_primary_of(LIMITER_TAG + "}")

        env = {**topo.env(), "LLMGW_LOG_LEVEL": "warning"}
        sim = [sys.executable, "-m", "gateway", "sim", "--port", str(sport), "--served-model-name", "sim"]
        sim += ["--profile", "small", "--output-len-mean", str(MAX_TOKENS), "--output-len-sigma", "0"]
        stack.enter_context(spawned(sim, None, f"http://127.0.0.1:{sport}/health", work / "sim.log"))
        urls = []
        for i in range(2):
            port = free_port()
            gw = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(port)]
            stack.enter_context(
                spawned(gw, None, f"http://127.0.0.1:{port}/healthz", work / f"gw{i}.log", env, timeout=120)
            )
            urls.append(f"http://127.0.0.1:{port}")
        run, killed_at = asyncio.run(_drive(urls, keys["budgeted"], opts, kill))
        time.sleep(opts.lease_s + 1.0)
        held = asyncio.run(_slots_held(urls, keys["slots"]))
    worst = worst_window([(t, tok) for t, status, tok in run.done if status == 200])
    failed, recovered = _recovery(run.done, killed_at)
    reservation = MAX_TOKENS + 64  # a request's output cap and its prompt estimate
    bound = opts.budget + 2 * reservation
    figures = {
        "topology": opts.topology,
        "mode": opts.mode,
        "requests": len(run.done),
        "statuses": dict(run.statuses),
        "failed_total": sum(n for s, n in run.statuses.items() if s not in (200, 429)),
        "failed_after_kill": failed,
        "seconds_to_recover": recovered,
        "budget": opts.budget,
        "worst_window_tokens": worst,
        "overshoot": round(worst / opts.budget, 3),
        "bound_without_loss": round(bound / opts.budget, 3),
        "slots_held_after_lease": held,
    }
    print(
        f"{opts.topology} failover, on_backend_error {opts.mode}: {len(run.done)} streams, statuses "
        f"{dict(run.statuses)}\n"
        f"failed during the switch: {failed} (in all {figures['failed_total']}); recovered "
        f"{'never' if recovered is None else f'{recovered} s'} after the kill, no restart\n"
        f"budgeted key: most tokens in a {WINDOW_S:.0f} s window {worst} of {opts.budget} = "
        f"{figures['overshoot']:.3f}x (one reservation per gateway allows "
        f"{figures['bound_without_loss']:.3f}x before what replication lost)\n"
        f"concurrency slots held {opts.lease_s:g} s after the load: {held} of {CONCURRENT}"
    )
    if opts.out is not None:
        opts.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
