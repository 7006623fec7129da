"""`python -m eval.bench.redis_throughput` (`make bench-redis-throughput`): limiter admissions per second
against a standalone Redis and a 3-primary Redis Cluster, from 1, 2 and 4 gateway processes (issue 41).
A report, not a test.

Each process is what a gateway's limiter is: a `RedisBackend` on the client the connection factory builds
from the `LLMGW_REDIS_*` settings (`gateway.redis_conn.script_client`: redis-py by default, `--client
resp` for the standalone fast path), admitting and settling the typical rule set (key, app, org, global,
pool levels: `ratelimit.bench.typical_rules`) with `--concurrency` requests in flight, for `--seconds`.
Every process uses its own key (its own tenant), as replicas serving many tenants do; all limiter keys
share one hash tag (docs/design/004), so on the cluster they all live on one shard: the table shows what
that costs and where it tops out. One admit + one settle is one request.

The processes and Redis share this machine's cores (`--cpus`): with more client processes than cores
the clients, not Redis, are what saturates; Redis's own CPU per second is printed next to each figure
(`INFO cpu`, summed over the nodes) so the shard's headroom can be read off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import redis

from eval.bench.procs import free_port, redis_args, redis_server, spawned
from gateway.redis_conn import script_client, target_of
from gateway.settings import Settings
from ratelimit.bench import typical_rules
from ratelimit.model import Admission
from ratelimit.redis_backend import RedisBackend
from ratelimit.rules import request_cost, usage_cost
from tests.support.redis_topologies import RedisCluster

PROCESSES = (1, 2, 4)


async def _worker(env: dict[str, str], seconds: float, concurrency: int, prefix: str) -> int:
    os.environ.update(env)
    target = target_of(Settings())
    assert target is not None
    backend = RedisBackend(script_client(target), lease_s=30, key_prefix=prefix)
    await backend.load()
    done = 0
    stop = time.monotonic() + seconds
    tenant = uuid.uuid4().hex[:8]

    async def loop(w: int) -> None:
        nonlocal done
        rules = typical_rules(f"key-{tenant}-{w}")
        i = 0
        while time.monotonic() < stop:
            i += 1
            d = await backend.admit(Admission(f"{tenant}-{w}-{i}", rules, request_cost(500, 256)))
            assert d.reservation is not None
            await backend.settle(d.reservation, usage_cost(500, 200))
            done += 1

    await asyncio.gather(*(loop(w) for w in range(concurrency)))
    await backend.close()
    return done


def _redis_cpu(ports: Sequence[int]) -> float:
    total = 0.0
    for port in ports:
        info = redis.Redis(port=port).info("cpu")
        total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


def _measure(
    env: dict[str, str], ports: Sequence[int], opts: argparse.Namespace, n: int
) -> tuple[float, float]:
    """(admissions per second over all `n` processes, Redis CPU seconds per second)."""
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    cpu0 = _redis_cpu(ports)
    args = [sys.executable, "-m", "eval.bench.redis_throughput", "--worker", json.dumps(env)]
    args += ["--seconds", str(opts.seconds), "--concurrency", str(opts.concurrency), "--prefix", prefix]
    t0 = time.monotonic()
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    counts = [int((p.communicate()[0] or "0").strip().splitlines()[-1]) for p in procs]
    elapsed = time.monotonic() - t0
    return sum(counts) / opts.seconds, (_redis_cpu(ports) - cpu0) / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.bench.redis_throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight per process")
    p.add_argument("--client", choices=("redis-py", "resp"), default="redis-py", help="standalone's client")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--prefix", default="bench", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.worker is not None:
        print(asyncio.run(_worker(json.loads(opts.worker), opts.seconds, opts.concurrency, opts.prefix)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-redis-throughput-"))
    rows: list[tuple[str, int, float, float]] = []
    port = free_port()
    with spawned(redis_args(redis_server(), port), None, f"redis://127.0.0.1:{port}", work / "redis.log"):
        env = {"LLMGW_REDIS_MODE": "standalone", "LLMGW_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        env["LLMGW_REDIS_LIMITER_CLIENT"] = opts.client
        for n in PROCESSES:
            rows.append((f"standalone ({opts.client})", n, *_measure(env, [port], opts, n)))
    with RedisCluster(work / "cluster") as cluster:
        env = {"LLMGW_REDIS_MODE": "cluster", "LLMGW_REDIS_URL": cluster.url}
        ports = [node.port for node in cluster.nodes]
        for n in PROCESSES:
            rows.append(("cluster, 3 primaries (redis-py)", n, *_measure(env, ports, opts, n)))
    print(
        f"limiter admit+settle per second, {opts.concurrency} in flight per process, {opts.seconds:g} s each"
    )
    print(f"{'Redis':<34} {'processes':>9} {'admissions/s':>13} {'Redis CPU s/s':>14}")
    for name, n, rate, cpu in rows:
        print(f"{name:<34} {n:>9} {rate:>13,.0f} {cpu:>14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
