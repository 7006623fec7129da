"""One side of `bench-lora`: fresh simulator replicas + a gateway with that side's policy, the load, counters.

Each side starts its own two replicas (so both start with empty GPU slots and cold caches) with every
adapter given by `--lora-modules` (the policy's `runtime_loading: false`), then a gateway whose one pool
lists the replicas statically and declares the adapters, with one alias per adapter. The swap and
request counters are read from the replicas' `/metrics` before and after the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eval.bench.lora.workload import Workload
from eval.bench.pools._load import Result, run_load
from eval.bench.procs import free_port, metric_sum, metrics_pages, simulator, spawned

MODEL = "bench-base"
POOL = "base"
SWAPS = "sim:lora_swaps_total"
SUCCESS = "vllm:request_success_total"


@dataclass(frozen=True)
class Side:
    name: str
    strategy: str  # the pool's balancing strategy
    affinity: bool  # lora.affinity: the picker looks at adapters


BASELINE = Side("round_robin", "round_robin", False)
AWARE = Side("adapter_aware", "least_load", True)


@dataclass(frozen=True)
class Replicas:
    """How each simulator replica runs."""

    max_loras: int = 2
    max_rank: int = 8
    swap_ms: float = 30.0
    profile: str = "small"
    extra: tuple[str, ...] = ()

    def flags(self, adapters: dict[str, Path]) -> list[str]:
        modules = [f"{name}={path}" for name, path in adapters.items()]
        return [
            "--profile", self.profile, "--enable-lora", "--max-loras", str(self.max_loras),
            "--max-lora-rank", str(self.max_rank), "--lora-swap-ms", f"{self.swap_ms:g}",
            *self.extra, "--lora-modules", *modules,
        ]  # fmt: skip


def policy(side: Side, ports: Sequence[int], adapters: dict[str, Path], reps: Replicas) -> dict[str, Any]:
    """The gateway policy of one side (the gateway's LoRA config contract, issue 29)."""
    lora = {
        "max_loras": reps.max_loras,
        "max_rank": reps.max_rank,
        "runtime_loading": False,
        "affinity": side.affinity,
        "adapters": [{"name": n, "source": str(p), "rank": reps.max_rank} for n, p in adapters.items()],
    }
    pool = {
        "name": POOL,
        "model": MODEL,
        "endpoints": {"static": [f"http://127.0.0.1:{p}" for p in ports]},
        "timeouts": {"connect_s": 2, "first_token_s": 120, "total_s": 300},
        "balancing": {"strategy": side.strategy, "scrape_interval_s": 0.25},
        "admission": {"max_queued": 4096, "max_wait_s": 120},
        "lora": lora,
    }
    models = [
        {"name": n, "route": {"pool": POOL, "adapter": n}, "max_tokens": {"default": 64, "cap": 4096}}
        for n in adapters
    ]
    return {"pools": [pool], "models": models, "tenancy": {"auth": "disabled"}}


def policy_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class SideRun:
    side: Side
    results: list[Result]
    swaps: float  # over the run, both replicas
    replica_requests: list[float]  # finished requests per replica
    seconds: float  # wall time of the load


@contextlib.contextmanager
def _stack(
    side: Side, adapters: dict[str, Path], reps: Replicas, work: Path
) -> Iterator[tuple[str, list[int]]]:
    ports = [free_port(), free_port()]
    gw = free_port()
    path = work / f"{side.name}.yaml"
    path.write_text(policy_yaml(policy(side, ports, adapters, reps)))
    with contextlib.ExitStack() as stack:
        for i, port in enumerate(ports):
            flags = ["--served-model-name", MODEL, *reps.flags(adapters)]
            stack.enter_context(simulator(port, flags, work / f"{side.name}-sim{i}.log"))
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--port", str(gw)]
        log = work / f"{side.name}-gateway.log"
        stack.enter_context(spawned(args, None, f"http://127.0.0.1:{gw}/healthz", log))
        yield f"http://127.0.0.1:{gw}/v1/chat/completions", ports


def run_side(
    side: Side,
    wl: Workload,
    adapters: dict[str, Path],
    reps: Replicas,
    load: tuple[float, float, int],
    work: Path,
) -> SideRun:
    """`load` = (rate per second, duration in seconds, arrivals seed)."""
    rate, duration, seed = load
    with _stack(side, adapters, reps, work) as (url, ports):
        time.sleep(1.0)  # a few scrapes of the replicas before the first request
        before = asyncio.run(metrics_pages(ports))
        t0 = time.monotonic()
        results = asyncio.run(run_load(url, wl.body, rate, duration, seed))
        seconds = time.monotonic() - t0
        after = asyncio.run(metrics_pages(ports))
    swaps = sum(metric_sum(b, SWAPS) - metric_sum(a, SWAPS) for a, b in zip(before, after, strict=True))
    done = [metric_sum(b, SUCCESS) - metric_sum(a, SUCCESS) for a, b in zip(before, after, strict=True)]
    return SideRun(side, results, swaps, done, seconds)
