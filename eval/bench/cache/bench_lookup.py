"""Lookup latency of the caches against a real Redis: the semantic KNN query and the exact GET.

    python -m eval.bench.cache.bench_lookup [--entries 10000] [--scopes 100] [--queries 5000] \
        [--algo FLAT HNSW]
    make bench-cache

Starts its own Redis 7.4 + RediSearch (.tools/bin/redis-stack-server, from scripts/install-redis-stack)
on a free port, fills a `RedisVectorIndex` per algorithm with `--entries` random unit vectors (dim
384) spread over `--scopes` scopes, then times `RedisVectorIndex.search` through `RespClient` with a
precomputed vector (the embedding is reused from routing, so encoding is not part of the lookup):
`--queries` calls one after another, and the same number from 8 coroutines on one event loop sharing
the one pipelined connection, as gateway requests do. Half of the queries are a stored vector plus
noise (a hit), half a fresh random vector (a miss). The exact cache's lookup is a GET of a 2 KB value
through the same client. Targets (issue 8): semantic P99 <= 10 ms, exact P99 <= 2 ms. A report, not a
test; writes JSON to bench-results/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cache.semantic import RedisVectorIndex, Vector
from eval.bench.procs import ROOT, free_port, redis_args, spawned
from ratelimit.resp import RespClient

WRAPPER = ROOT / ".tools" / "bin" / "redis-stack-server"
DIM = 384
MIN_SIMILARITY = 0.9


@contextlib.contextmanager
def redis_stack(workdir: Path) -> Iterator[int]:
    """A throw-away Redis Stack on a free port, until the block ends; yields the port."""
    if not os.access(WRAPPER, os.X_OK):
        raise SystemExit(f"{WRAPPER} is missing: run scripts/install-redis-stack first")
    port = free_port()
    ready, log = f"redis://127.0.0.1:{port}/0", workdir / "redis.log"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(
                spawned(redis_args(str(WRAPPER), port), None, ready, log, cwd=workdir, timeout=10)
            )
        except (RuntimeError, TimeoutError) as exc:  # it did not start: say why, without a traceback
            raise SystemExit(f"redis-stack-server: {exc}") from None
        yield port


def random_units(rng: np.random.Generator, n: int) -> Vector:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    out: Vector = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


async def timed(calls: list[Callable[[], Awaitable[Any]]], concurrency: int) -> dict[str, Any]:
    """Run `calls` from `concurrency` coroutines; latency of each call, and the throughput."""
    latencies: list[float] = []
    results: list[Any] = []
    queue = iter(calls)

    async def worker() -> None:
        for call in queue:  # the shared iterator hands each call to exactly one worker
            t = time.perf_counter()
            results.append(await call())
            latencies.append(1000 * (time.perf_counter() - t))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    hits = sum(1 for r in results if r is not None)
    return {
        **percentiles(latencies),
        "concurrency": concurrency,
        "per_s": round(len(calls) / elapsed),
        "non_empty": hits,
    }


async def fill(index: RedisVectorIndex, scopes: list[bytes], vectors: Vector, value: bytes) -> float:
    started = time.perf_counter()
    batch = 256
    for lo in range(0, len(vectors), batch):
        await asyncio.gather(
            *(
                index.add(scopes[i % len(scopes)], vectors[i], value, ttl_s=3600)
                for i in range(lo, min(lo + batch, len(vectors)))
            )
        )
    return time.perf_counter() - started


async def bench_semantic(
    client: RespClient, algo: str, args: argparse.Namespace, rng: np.random.Generator
) -> dict[str, Any]:
    index = RedisVectorIndex(client, index=f"bench-{algo.lower()}", prefix=f"bench:{algo.lower()}:".encode())
    reason = await index.ensure()
    if reason is not None:
        raise SystemExit(reason)
    scopes = [f"tenant-{i}|model|sys".encode() for i in range(args.scopes)]
    stored = random_units(rng, args.entries)
    fill_s = await fill(index, scopes, stored, b"x" * args.value_bytes)
    info = await client.execute("FT.INFO", index.index_name)
    fields = dict(zip(info[::2], info[1::2], strict=False))
    out: dict[str, Any] = {
        "algorithm": algo,
        "entries": int(fields.get(b"num_docs", 0)),
        "fill_s": round(fill_s, 2),
        "vector_index_mb": float(fields.get(b"vector_index_sz_mb", 0.0)),
    }
    for concurrency in (1, 8):
        calls: list[Callable[[], Awaitable[Any]]] = []
        for q in range(args.queries):
            if q % 2 == 0:  # near a stored entry, asked in that entry's scope: a hit
                i = int(rng.integers(args.entries))
                noisy = stored[i] + 0.01 * rng.standard_normal(DIM).astype(np.float32)
                scope, vec = scopes[i % len(scopes)], noisy
            else:
                scope, vec = scopes[int(rng.integers(len(scopes)))], random_units(rng, 1)[0]
            calls.append(functools.partial(index.search, scope, vec, MIN_SIMILARITY))
        await timed(calls[: min(200, len(calls))], concurrency)  # warm-up
        out[f"c{concurrency}"] = await timed(calls, concurrency)
    return out


async def bench_exact(client: RespClient, args: argparse.Namespace) -> dict[str, Any]:
    await client.execute("SET", "bench:exact", os.urandom(1024).hex())  # 2 KB, like a short reply
    out: dict[str, Any] = {"value_bytes": 2048}
    for concurrency in (1, 8):
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: client.execute("GET", "bench:exact") for _ in range(args.queries)
        ]
        await timed(calls[:200], concurrency)
        out[f"c{concurrency}"] = await timed(calls, concurrency)
    return out


async def run(args: argparse.Namespace, port: int) -> dict[str, Any]:
    client = RespClient("127.0.0.1", port, op_timeout_s=5.0, connect_timeout_s=2.0)
    rng = np.random.default_rng(args.seed)
    try:
        semantic = [await bench_semantic(client, algo, args, rng) for algo in args.algo]
        exact = await bench_exact(client, args)
    finally:
        await client.aclose()
    return {"semantic": semantic, "exact": exact}


COLUMNS = ("lookup", "conc", "p50 ms", "p90 ms", "p99 ms", "max ms", "per s", "hits")
WIDTHS = (22, 4, 7, 7, 7, 7, 6, 5)


def _line(cells: tuple[object, ...]) -> str:
    pairs = enumerate(zip(cells, WIDTHS, strict=True))
    return " ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in pairs)


def print_result(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(f"{cfg['entries']} entries over {cfg['scopes']} scopes, dim {DIM}, {cfg['queries']} queries/row")
    print(_line(COLUMNS))
    rows = [(f"semantic {s['algorithm']}", s) for s in result["semantic"]]
    rows.append(("exact GET 2 KB", result["exact"]))
    for name, r in rows:
        for m in (r["c1"], r["c8"]):
            ms = tuple(f"{m[k]:.3f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
            print(_line((name, m["concurrency"], *ms, m["per_s"], m["non_empty"])))
    for s in result["semantic"]:
        print(f"  {s['algorithm']}: fill {s['fill_s']} s, vector index {s['vector_index_mb']:.1f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench.cache.bench_lookup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--scopes", type=int, default=100)
    parser.add_argument("--queries", type=int, default=5_000)
    parser.add_argument("--value-bytes", type=int, default=2048)
    parser.add_argument("--algo", nargs="+", default=["FLAT", "HNSW"], choices=["FLAT", "HNSW"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/cache-lookup.json"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp, redis_stack(Path(tmp)) as port:
        result = asyncio.run(run(args, port))
    result["config"] = {k: v for k, v in vars(args).items() if k != "out"} | {"dim": DIM}
    result["targets"] = {"semantic_p99_ms": 10.0, "exact_p99_ms": 2.0}
    print_result(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
