"""The two scenarios of issue 5 and how one run is staged (fresh simulators + gateway per run).

slow-replica: 4 replicas, one 3x slower (every latency term of its profile x3), small batches
(`max_num_seqs`) so work queues; offered load ~65 % of the pool's capacity. Round robin gives the
slow replica a quarter of the traffic, more than its capacity, and its queue grows; least load
sends it what it can take.

shared-prefix: 16 long system prompts (~1,200 tokens) shared by all requests, each replica's KV
cache holding only ~5 of them. Round robin shows every prompt to every replica, so LRU evicts and
prompts are recomputed; prefix affinity gives each prompt a home replica whose cache keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.bench.pools._load import Result, run_load
from eval.bench.procs import free_port, metric_sum, metrics_pages, spawned

MODEL = "bench"


@dataclass(frozen=True)
class Scenario:
    name: str
    replica_flags: list[list[str]]  # simulator flags per replica
    balancing: str  # extra YAML for the pool's balancing block
    rate: float
    duration: float
    body: Any = field(repr=False)  # (i) -> request body


def _profile_flags(slowdown: float, **fixed: float | int) -> list[str]:
    latency = {"step_base_ms": 20.0, "prefill_per_token_ms": 0.1, "decode_per_seq_ms": 1.0}
    flags: list[str] = []
    for k, v in latency.items():
        flags += [f"--{k.replace('_', '-')}", str(v * slowdown)]
    for k, v2 in fixed.items():
        flags += [f"--{k.replace('_', '-')}", str(v2)]
    return flags


def summary_body(i: int) -> dict[str, Any]:
    """A short prompt streaming exactly 32 tokens (the slow-replica and fair-queue requests)."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Request {i}: summarize the incident report."}],
        "max_tokens": 32,
        "ignore_eos": True,
        "stream": True,
    }


def slow_replica(duration: float, rate: float) -> Scenario:
    fast = _profile_flags(1.0, max_num_seqs=4)
    slow = _profile_flags(3.0, max_num_seqs=4)
    return Scenario("slow-replica", [fast, fast, fast, slow], "", rate, duration, summary_body)


def _system_prompts(n: int, words: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        f"You are assistant {k}. " + " ".join("".join(rng.choices(letters, k=4)) for _ in range(words))
        for k in range(n)
    ]


def shared_prefix(duration: float, rate: float) -> Scenario:
    prompts = _system_prompts(16, 1200)
    flags = [
        "--step-base-ms", "15", "--prefill-per-token-ms", "0.25", "--decode-per-seq-ms", "0.5",
        "--kv-capacity-tokens", "12288", "--max-model-len", "4096",
    ]  # fmt: skip
    rng = random.Random(3)
    choice = [rng.randrange(len(prompts)) for _ in range(100_000)]

    def body(i: int) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": prompts[choice[i]]},
                {"role": "user", "content": f"Question {i}: what changed since yesterday?"},
            ],
            "max_tokens": 48,
            "ignore_eos": True,
            "stream": True,
        }

    return Scenario("shared-prefix", [flags] * 4, "", rate, duration, body)


@dataclass(frozen=True)
class RunResult:
    strategy: str
    results: list[Result]
    replica_requests: list[float]  # per replica, from the simulators' own counters
    prefix_queries: float
    prefix_hits: float
    whole_run_hit_rate: float  # warm-up included, for reference


def _policy(ports: list[int], strategy: str) -> str:
    urls = ", ".join(f'"http://127.0.0.1:{p}"' for p in ports)
    return (
        "pools:\n"
        f"  - name: {MODEL}\n"
        f"    model: {MODEL}\n"
        f"    endpoints: {{static: [{urls}]}}\n"
        "    timeouts: {connect_s: 2, first_token_s: 120, total_s: 300}\n"
        f"    balancing: {{strategy: {strategy}, scrape_interval_s: 0.25}}\n"
        "    admission: {max_queued: 4096, max_wait_s: 120}\n"
        "models:\n"
        f"  - {{name: {MODEL}, route: {{pool: {MODEL}}}, max_tokens: {{default: 64, cap: 4096}}}}\n"
        "tenancy: {auth: disabled}\n"
    )


@contextlib.contextmanager
def _stack(sc: Scenario, strategy: str, work: Path) -> Iterator[tuple[str, list[int]]]:
    ports = [free_port() for _ in sc.replica_flags]
    gw = free_port()
    policy = work / f"{sc.name}-{strategy}.yaml"
    policy.write_text(_policy(ports, strategy))
    with contextlib.ExitStack() as stack:
        for i, (port, flags) in enumerate(zip(ports, sc.replica_flags, strict=True)):
            args = ["nice", sys.executable, "-m", "gateway", "sim", "--host", "127.0.0.1"]
            args += ["--port", str(port), "--served-model-name", MODEL, *flags]
            log = work / f"{sc.name}-{strategy}-sim{i}.log"
            stack.enter_context(spawned(args, None, f"http://127.0.0.1:{port}/health", log))
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(policy), "--port", str(gw)]
        log = work / f"{sc.name}-{strategy}-gateway.log"
        stack.enter_context(spawned(args, None, f"http://127.0.0.1:{gw}/healthz", log))
        yield f"http://127.0.0.1:{gw}/v1/chat/completions", ports


def _counters(pages: list[str]) -> tuple[list[float], float, float]:
    return (
        [metric_sum(p, "vllm:request_success_total") for p in pages],
        sum(metric_sum(p, "vllm:prefix_cache_queries_total") for p in pages),
        sum(metric_sum(p, "vllm:prefix_cache_hits_total") for p in pages),
    )


async def _measure(url: str, sc: Scenario, ports: list[int], warmup: float) -> tuple[list[Result], list[str]]:
    async def snapshot() -> list[str]:
        await asyncio.sleep(warmup)
        return await metrics_pages(ports)

    snap = asyncio.create_task(snapshot())
    results = await run_load(url, sc.body, sc.rate, sc.duration)
    return results, await snap


def run(sc: Scenario, strategy: str, work: Path, warmup: float) -> RunResult:
    """One strategy on fresh replicas; counters and TTFTs after `warmup` seconds (caches warm)."""
    with _stack(sc, strategy, work) as (url, ports):
        results, before = asyncio.run(_measure(url, sc, ports, warmup))
        after = asyncio.run(metrics_pages(ports))
    (req0, q0, h0), (req1, q1, h1) = _counters(before), _counters(after)
    return RunResult(
        strategy=strategy,
        results=[r for r in results if r.sent_at >= warmup],
        replica_requests=[b - a for a, b in zip(req0, req1, strict=True)],
        prefix_queries=q1 - q0,
        prefix_hits=h1 - h0,
        whole_run_hit_rate=h1 / q1 if q1 else 0.0,
    )
