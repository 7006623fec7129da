"""Micro-benchmark: admit + settle latency of the Redis backend against a local redis-server.

    python -m ratelimit.bench [--url redis://127.0.0.1:6379/0] [--n 5000] [--concurrency 1]

Each request is one EVALSHA to admit (rules at key, app, org, global and pool levels: the typical
shape) and one to settle. Reports latency percentiles; a report, not an assertion (design §10).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from ratelimit.model import Admission, Dimension, Level, Rule
from ratelimit.redis_backend import RedisBackend
from ratelimit.rules import request_cost, usage_cost


def typical_rules(key: str) -> tuple[Rule, ...]:
    big = 10**12
    return (
        Rule(Level.KEY, key, Dimension.REQUESTS, big),
        Rule(Level.KEY, key, Dimension.TOKENS, big),
        Rule(Level.APP, "acme/app", Dimension.TOKENS, big),
        Rule(Level.ORG, "acme", Dimension.TOKENS, big, reserved_share=0.1),
        Rule(Level.ORG, "acme", Dimension.CONCURRENT, big),
        Rule(Level.ORG, "acme", Dimension.TOKENS_DAY, big),
        Rule(Level.GLOBAL, "*", Dimension.TOKENS, big, reserved_share=0.1),
        Rule(Level.POOL, "large", Dimension.OUTPUT_TOKENS, big),
    )


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


async def run(url: str, n: int, concurrency: int) -> None:
    backend = RedisBackend.from_url(url, lease_s=30, key_prefix=f"bench-{uuid.uuid4().hex[:8]}")
    await backend.load()
    admits: list[float] = []
    settles: list[float] = []

    async def worker(w: int) -> None:
        rules = typical_rules(f"key-{w}")
        for i in range(n // concurrency):
            t0 = time.perf_counter()
            d = await backend.admit(Admission(f"{w}-{i}", rules, request_cost(500, 256)))
            t1 = time.perf_counter()
            assert d.reservation is not None
            await backend.settle(d.reservation, usage_cost(500, 200))
            admits.append(t1 - t0)
            settles.append(time.perf_counter() - t1)

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    await backend.close()
    print(f"{len(admits)} requests x {len(typical_rules('k'))} rules, concurrency {concurrency}")
    for name, values in (("admit", admits), ("settle", settles)):
        print(
            f"{name:7s} p50 {pct(values, 0.5):.3f} ms  p99 {pct(values, 0.99):.3f} ms  "
            f"mean {statistics.fmean(values) * 1000:.3f} ms"
        )
    print(f"throughput {len(admits) / elapsed:.0f} admit+settle/s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(run(args.url, args.n, args.concurrency))


if __name__ == "__main__":
    main()
